/// An element of a parsed document: its expanded name, attributes, child elements and text.
///
/// Only what Metalink needs is kept: character data (text and CDATA) directly inside an element without child
/// elements is concatenated into ``text`` (a container's is dropped); comments and processing instructions are dropped.
struct XMLElement: Sendable, Hashable {
    /// The namespace URI the element's prefix (or the default namespace) is bound to, `nil` for none.
    var namespace: String?
    /// The name without its prefix.
    var localName: String
    /// The attributes other than namespace declarations, in document order.
    var attributes: [XMLAttribute]
    /// The child elements in document order.
    var children: [XMLElement]
    /// The character data directly inside the element, references decoded, line ends normalised to LF; empty
    /// when the element has child elements.
    var text: String
    /// Where the start tag begins (1-based line, column in Unicode scalars).
    var line: Int
    var column: Int

    /// The value of the unprefixed attribute `name` (Metalink's attributes are all unprefixed).
    func attribute(_ name: String) -> String? {
        attributes.first { $0.namespace == nil && $0.localName == name }?.value
    }

    /// The child elements named `localName` in `namespace`.
    func children(_ localName: String, in namespace: String) -> [XMLElement] {
        children.filter { $0.localName == localName && $0.namespace == namespace }
    }
}

/// An attribute: expanded name and normalised value.
struct XMLAttribute: Sendable, Hashable {
    var namespace: String?
    var localName: String
    var value: String
}

/// A small, non-validating XML 1.0 reader for Metalink documents: elements, attributes in either quote style,
/// namespaces (prefix → URI), text and CDATA, the five predefined entities and character references. Comments,
/// processing instructions and the XML declaration are skipped. A DOCTYPE is refused (no DTD is ever read, so
/// no entity is ever expanded and nothing external is ever fetched). Iterative, so depth costs no stack.
///
/// Pure: bytes in, a tree or a ``MetalinkError`` with a line and column out.
struct XMLReader {
    private let bytes: [UInt8]
    private let limits: MetalinkLimits
    private var index = 0

    // Position tracking: offsets are visited in increasing order, so line and column advance incrementally.
    private var trackedOffset = 0
    private var trackedLine = 1
    private var trackedColumn = 1

    static let xmlNamespace = "http://www.w3.org/XML/1998/namespace"

    private struct OpenElement {
        var qualifiedName: String
        var prefix: String?
        var localName: String
        var rawAttributes: [(prefix: String?, localName: String, value: String)]
        var children: [XMLElement] = []
        var text: [UInt8] = []
        var line: Int
        var column: Int
        var start: Int
    }

    /// Parses a whole document.
    /// - Throws: ``MetalinkError`` (malformed XML, DOCTYPE, undefined entity, encoding, unbound prefix, a limit).
    static func parse(_ bytes: [UInt8], limits: MetalinkLimits = .default) throws(MetalinkError) -> XMLElement {
        guard bytes.count <= limits.maxBytes else {
            throw MetalinkError(
                .sizeLimitExceeded,
                "document has \(bytes.count) bytes, more than the limit of \(limits.maxBytes) (maxBytes)")
        }
        var reader = XMLReader(bytes: bytes, limits: limits)
        try reader.validateCharacters()
        return try reader.document()
    }

    private init(bytes: [UInt8], limits: MetalinkLimits) {
        self.bytes = bytes
        self.limits = limits
    }

    // MARK: - Errors and positions

    /// The line and column of `offset`.
    private mutating func position(_ offset: Int) -> (line: Int, column: Int) {
        if offset < trackedOffset { (trackedOffset, trackedLine, trackedColumn) = (0, 1, 1) }
        while trackedOffset < offset, trackedOffset < bytes.count {
            let byte = bytes[trackedOffset]
            if byte == 0x0A {
                trackedLine += 1
                trackedColumn = 1
            } else if byte & 0xC0 != 0x80 {
                trackedColumn += 1
            }
            trackedOffset += 1
        }
        return (trackedLine, trackedColumn)
    }

    private mutating func error(_ code: MetalinkError.Code, at offset: Int? = nil, _ detail: String) -> MetalinkError {
        let (line, column) = position(offset ?? index)
        return MetalinkError(code, line: line, column: column, detail)
    }

    private mutating func malformed(at offset: Int? = nil, _ detail: String) -> MetalinkError {
        error(.malformedXML, at: offset, detail)
    }

    /// A name or other input quoted in an error detail, cut to 40 scalars.
    static func shown(_ text: some StringProtocol) -> String {
        let scalars = text.unicodeScalars
        if scalars.count <= 40 { return String(text) }
        var view = String.UnicodeScalarView()
        view.append(contentsOf: scalars.prefix(40))
        return String(view) + "…"
    }

    // MARK: - Characters

    /// Refuses invalid UTF-8 and the characters XML 1.0 forbids (§2.2: C0 controls other than TAB, LF and
    /// CR; U+FFFE and U+FFFF). Surrogates cannot occur in valid UTF-8.
    private mutating func validateCharacters() throws(MetalinkError) {
        var parser = Unicode.UTF8.ForwardParser()
        var iterator = bytes.makeIterator()
        var offset = 0
        while true {
            switch parser.parseScalar(from: &iterator) {
            case .valid(let encoded):
                let scalar = Unicode.UTF8.decode(encoded)
                if !Self.isXMLCharacter(scalar.value) {
                    throw malformed(
                        at: offset,
                        "character U+\(String(scalar.value, radix: 16, uppercase: true)) is not allowed in XML")
                }
                offset += encoded.count
            case .error(let length):
                throw malformed(at: offset, "invalid UTF-8 (byte \(offset), \(length) byte(s))")
            case .emptyInput:
                return
            }
        }
    }

    static func isXMLCharacter(_ value: UInt32) -> Bool {
        switch value {
        case 0x09, 0x0A, 0x0D, 0x20...0xD7FF, 0xE000...0xFFFD, 0x10000...0x10FFFF: true
        default: false
        }
    }

    private var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    private func startsWith(_ literal: StaticString) -> Bool {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - index >= count else { return false }
        return literal.withUTF8Buffer { buffer in
            for offset in 0..<count where bytes[index + offset] != buffer[offset] { return false }
            return true
        }
    }

    /// The offset of the next `literal` at or after `from`, or `nil`.
    private func find(_ literal: StaticString, from: Int) -> Int? {
        let count = literal.utf8CodeUnitCount
        return literal.withUTF8Buffer { buffer -> Int? in
            var offset = from
            while offset + count <= bytes.count {
                if bytes[offset] == buffer[0] {
                    var matched = true
                    for k in 1..<count where bytes[offset + k] != buffer[k] {
                        matched = false
                        break
                    }
                    if matched { return offset }
                }
                offset += 1
            }
            return nil
        }
    }

    private static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D }

    private mutating func skipSpaces() { while let byte = current, Self.isSpace(byte) { index += 1 } }

    private static func isNameStart(_ byte: UInt8) -> Bool {
        (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || byte == 0x5F || byte == 0x3A || byte >= 0x80
    }

    private static func isNameCharacter(_ byte: UInt8) -> Bool {
        isNameStart(byte) || (byte >= 0x30 && byte <= 0x39) || byte == 0x2D || byte == 0x2E
    }

    /// A Name (XML 1.0 §2.3, with every non-ASCII character accepted), split at its one `:` into prefix and
    /// local name (Namespaces in XML §4: a QName has at most one colon, and neither side is empty).
    private mutating func qualifiedName(_ what: String) throws(MetalinkError) -> (
        qualified: String, prefix: String?, local: String
    ) {
        let start = index
        guard let first = current, Self.isNameStart(first) else {
            throw malformed("expected \(what)")
        }
        while let byte = current, Self.isNameCharacter(byte) { index += 1 }
        let name = bytes[start..<index]
        let colons = name.indices.filter { name[$0] == 0x3A }
        let qualified = String(decoding: name, as: UTF8.self)
        switch colons.count {
        case 0:
            return (qualified, nil, qualified)
        case 1 where colons[0] > start && colons[0] < index - 1:
            return (
                qualified, String(decoding: bytes[start..<colons[0]], as: UTF8.self),
                String(decoding: bytes[(colons[0] + 1)..<index], as: UTF8.self)
            )
        default:
            throw malformed(at: start, "\(what) '\(Self.shown(qualified))' is not a qualified name (prefix:local)")
        }
    }

    // MARK: - References

    /// Decodes the reference whose `&` is at `index`, appending its UTF-8 bytes to `output`.
    private mutating func reference(into output: inout [UInt8]) throws(MetalinkError) {
        let start = index
        index += 1
        guard let semicolon = bytes[index...].prefix(16).firstIndex(of: 0x3B) else {
            throw malformed(at: start, "'&' does not start a reference ending in ';' (write &amp; for a literal '&')")
        }
        let body = bytes[index..<semicolon]
        index = semicolon + 1
        if body.first == 0x23 {  // '#'
            var digits = body.dropFirst()
            var radix: UInt32 = 10
            if digits.first == 0x78 {  // 'x'
                radix = 16
                digits = digits.dropFirst()
            }
            guard !digits.isEmpty, digits.count <= 8 else {
                throw malformed(
                    at: start, "character reference '&\(String(decoding: body, as: UTF8.self));' is malformed")
            }
            var value: UInt32 = 0
            for digit in digits {
                let d: UInt32
                switch digit {
                case 0x30...0x39: d = UInt32(digit - 0x30)
                case 0x61...0x66 where radix == 16: d = UInt32(digit - 0x61 + 10)
                case 0x41...0x46 where radix == 16: d = UInt32(digit - 0x41 + 10)
                default:
                    throw malformed(
                        at: start, "character reference '&\(String(decoding: body, as: UTF8.self));' has a non-digit")
                }
                value = value * radix + d  // at most 8 hex digits: fits in UInt32
            }
            guard Self.isXMLCharacter(value), let scalar = Unicode.Scalar(value) else {
                throw malformed(
                    at: start,
                    "character reference '&\(String(decoding: body, as: UTF8.self));' names a character XML does not allow"
                )
            }
            output.append(contentsOf: String(Character(scalar)).utf8)
            return
        }
        switch String(decoding: body, as: UTF8.self) {
        case "lt": output.append(0x3C)
        case "gt": output.append(0x3E)
        case "amp": output.append(0x26)
        case "apos": output.append(0x27)
        case "quot": output.append(0x22)
        case let name:
            throw error(
                .undefinedEntity, at: start,
                "entity '&\(Self.shown(name));' is not one of XML's five (lt, gt, amp, apos, quot); no DTD is read")
        }
    }

    /// Appends `byte` to a value, enforcing ``MetalinkLimits/maxValueBytes``.
    private mutating func checkValueLength(_ value: [UInt8], _ what: @autoclosure () -> String, at start: Int)
        throws(MetalinkError)
    {
        if value.count > limits.maxValueBytes {
            throw error(
                .valueLimitExceeded, at: start,
                "\(what()) is longer than the limit of \(limits.maxValueBytes) bytes (maxValueBytes)")
        }
    }

    // MARK: - Markup

    /// Skips `<?target …?>` at `index`; returns the target.
    private mutating func processingInstruction() throws(MetalinkError) -> String {
        let start = index
        index += 2
        let (target, _, _) = try qualifiedName("processing instruction target")
        guard let end = find("?>", from: index) else {
            throw malformed(at: start, "unterminated processing instruction")
        }
        index = end + 2
        return target
    }

    /// Checks the XML declaration's `encoding`, if any (UTF-8 and its ASCII subset only).
    private mutating func xmlDeclaration() throws(MetalinkError) {
        let start = index
        guard let end = find("?>", from: index) else { throw malformed(at: start, "unterminated XML declaration") }
        let declaration = String(decoding: bytes[start..<end], as: UTF8.self)
        index = end + 2
        guard let range = declaration.firstRange(of: "encoding") else { return }
        var rest = declaration[range.upperBound...].drop { " \t\r\n=".contains($0) }
        guard let quote = rest.first, quote == "\"" || quote == "'" else {
            throw malformed(at: start, "XML declaration's encoding has no quoted value")
        }
        rest = rest.dropFirst()
        let name = rest.prefix { $0 != quote }.lowercased()
        guard ["utf-8", "utf8", "us-ascii", "ascii"].contains(name) else {
            throw error(
                .unsupportedEncoding, at: start,
                "encoding '\(Self.shown(name))' is not supported; Metalink documents are read as UTF-8")
        }
    }

    /// Reads the document: prolog, one root element, trailing comments/PIs/white space.
    private mutating func document() throws(MetalinkError) -> XMLElement {
        if startsWith("\u{FEFF}") { index += 3 }
        if startsWith("<?xml"), index + 5 < bytes.count, Self.isSpace(bytes[index + 5]) { try xmlDeclaration() }

        var stack: [OpenElement] = []
        var scopes: [[String: String]] = [["xml": Self.xmlNamespace]]
        var root: XMLElement?
        var elementCount = 0

        while index < bytes.count {
            let byte = bytes[index]
            if byte == 0x3C {  // '<'
                if startsWith("<?") {
                    let start = index
                    let target = try processingInstruction()
                    if target.lowercased() == "xml" {
                        throw malformed(at: start, "an XML declaration is allowed only at the very start")
                    }
                } else if startsWith("<!--") {
                    guard let end = find("-->", from: index + 4) else { throw malformed("unterminated comment") }
                    index = end + 3
                } else if startsWith("<![CDATA[") {
                    let start = index
                    guard !stack.isEmpty else { throw malformed("CDATA section outside the root element") }
                    guard let end = find("]]>", from: index + 9) else {
                        throw malformed(at: start, "unterminated CDATA section")
                    }
                    if stack[stack.count - 1].children.isEmpty {
                        appendText(bytes[(index + 9)..<end], to: &stack[stack.count - 1].text)
                        try checkValueLength(
                            stack[stack.count - 1].text, "text of <\(stack[stack.count - 1].qualifiedName)>", at: start)
                    }
                    index = end + 3
                } else if startsWith("<!DOCTYPE") {
                    throw error(
                        .doctypeRefused, "a DOCTYPE is refused: no DTD is read, so no entity can be expanded or fetched"
                    )
                } else if startsWith("<!") {
                    throw malformed("'<!' starts no comment or CDATA section")
                } else if startsWith("</") {
                    let start = index
                    index += 2
                    let (name, _, _) = try qualifiedName("end tag name")
                    skipSpaces()
                    guard current == 0x3E else { throw malformed("expected '>' to end </\(Self.shown(name))>") }
                    index += 1
                    guard let open = stack.popLast() else {
                        throw malformed(at: start, "end tag </\(Self.shown(name))> with no element open")
                    }
                    guard open.qualifiedName == name else {
                        throw malformed(
                            at: start,
                            "end tag </\(Self.shown(name))> does not match <\(Self.shown(open.qualifiedName))> (line \(open.line))"
                        )
                    }
                    let element = try close(open, scope: scopes.removeLast())
                    if stack.isEmpty { root = element } else { Self.append(element, to: &stack[stack.count - 1]) }
                } else {
                    let start = index
                    guard root == nil else { throw malformed("a second root element; a document has exactly one") }
                    elementCount += 1
                    if elementCount > limits.maxElements {
                        throw error(.elementLimitExceeded, "more than \(limits.maxElements) elements (maxElements)")
                    }
                    if stack.count + 1 > limits.maxDepth {
                        throw error(.depthLimitExceeded, "elements nest deeper than \(limits.maxDepth) (maxDepth)")
                    }
                    var (open, scope, selfClosing) = try startTag(parentScope: scopes[scopes.count - 1])
                    (open.line, open.column) = position(start)
                    open.start = start
                    if selfClosing {
                        let element = try close(open, scope: scope)
                        if stack.isEmpty { root = element } else { Self.append(element, to: &stack[stack.count - 1]) }
                    } else {
                        stack.append(open)
                        scopes.append(scope)
                    }
                }
            } else if stack.isEmpty {
                guard Self.isSpace(byte) else {
                    throw malformed(root == nil ? "text before the root element" : "text after the root element")
                }
                index += 1
            } else if byte == 0x26 {  // '&'
                let start = index
                if stack[stack.count - 1].children.isEmpty {
                    try reference(into: &stack[stack.count - 1].text)
                    try checkValueLength(
                        stack[stack.count - 1].text, "text of <\(stack[stack.count - 1].qualifiedName)>", at: start)
                } else {
                    var dropped: [UInt8] = []
                    try reference(into: &dropped)  // still checked
                }
            } else {
                let start = index
                while index < bytes.count, bytes[index] != 0x3C, bytes[index] != 0x26 { index += 1 }
                if stack[stack.count - 1].children.isEmpty {
                    appendText(bytes[start..<index], to: &stack[stack.count - 1].text)
                    try checkValueLength(
                        stack[stack.count - 1].text, "text of <\(stack[stack.count - 1].qualifiedName)>", at: start)
                }
            }
        }
        if let open = stack.last {
            throw malformed(at: open.start, "<\(Self.shown(open.qualifiedName))> is never closed")
        }
        guard let root else { throw malformed("no root element") }
        return root
    }

    /// Adds a finished child to its parent. An element with children keeps no text: in Metalink that is the white
    /// space between a container's children, which would otherwise add up (102,400 piece hashes, one line each,
    /// make 100 KiB of it) against ``MetalinkLimits/maxValueBytes`` and memory for nothing.
    private static func append(_ child: XMLElement, to parent: inout OpenElement) {
        if parent.children.isEmpty { parent.text = [] }
        parent.children.append(child)
    }

    /// Appends character data with line ends normalised (XML 1.0 §2.11: CR LF and lone CR become LF).
    private func appendText(_ slice: ArraySlice<UInt8>, to text: inout [UInt8]) {
        var previousCR = false
        for byte in slice {
            if byte == 0x0D {
                text.append(0x0A)
                previousCR = true
            } else {
                if !(byte == 0x0A && previousCR) { text.append(byte) }
                previousCR = false
            }
        }
    }

    /// Reads a start tag at `index` (its `<`), declaring its namespaces in a new scope.
    private mutating func startTag(parentScope: [String: String]) throws(MetalinkError) -> (
        OpenElement, [String: String], Bool
    ) {
        index += 1
        let (qualified, prefix, local) = try qualifiedName("element name")
        var scope = parentScope
        var attributes: [(prefix: String?, localName: String, value: String)] = []
        var seen: Set<String> = []
        while true {
            let hadSpace = current.map(Self.isSpace) ?? false
            skipSpaces()
            guard let byte = current else { throw malformed("start tag <\(Self.shown(qualified))> is not closed") }
            if byte == 0x3E {
                index += 1
                return (Self.open(qualified, prefix, local, attributes), scope, false)
            }
            if byte == 0x2F {
                guard index + 1 < bytes.count, bytes[index + 1] == 0x3E else { throw malformed("expected '/>'") }
                index += 2
                return (Self.open(qualified, prefix, local, attributes), scope, true)
            }
            guard hadSpace else { throw malformed("attributes must be separated by white space") }
            let attributeStart = index
            let (name, attributePrefix, attributeLocal) = try qualifiedName("attribute name")
            guard seen.insert(name).inserted else {
                throw malformed(
                    at: attributeStart, "attribute '\(Self.shown(name))' appears twice on <\(Self.shown(qualified))>")
            }
            if seen.count > limits.maxAttributes {
                throw error(
                    .attributeLimitExceeded, at: attributeStart,
                    "<\(Self.shown(qualified))> has more than \(limits.maxAttributes) attributes (maxAttributes)")
            }
            skipSpaces()
            guard current == 0x3D else { throw malformed("expected '=' after attribute '\(Self.shown(name))'") }
            index += 1
            skipSpaces()
            let value = try attributeValue(name)
            if name == "xmlns" {
                scope[""] = value
            } else if attributePrefix == "xmlns" {
                guard !value.isEmpty else {
                    throw malformed(
                        at: attributeStart,
                        "namespace prefix '\(Self.shown(attributeLocal))' cannot be bound to an empty URI")
                }
                scope[attributeLocal] = value
            } else {
                attributes.append((attributePrefix, attributeLocal, value))
            }
        }
    }

    private static func open(
        _ qualified: String, _ prefix: String?, _ local: String,
        _ attributes: [(prefix: String?, localName: String, value: String)]
    ) -> OpenElement {
        OpenElement(
            qualifiedName: qualified, prefix: prefix, localName: local, rawAttributes: attributes, line: 0, column: 0,
            start: 0)
    }

    /// Reads a quoted attribute value at `index`, decoding references and normalising white space to spaces
    /// (XML 1.0 §3.3.3: a literal TAB, LF, CR or CR LF becomes one space; a character reference stays as written).
    private mutating func attributeValue(_ name: String) throws(MetalinkError) -> String {
        let start = index
        guard let quote = current, quote == 0x22 || quote == 0x27 else {
            throw malformed("value of attribute '\(Self.shown(name))' is not quoted")
        }
        index += 1
        var value: [UInt8] = []
        while true {
            guard let byte = current else {
                throw malformed(at: start, "value of attribute '\(Self.shown(name))' is not closed")
            }
            switch byte {
            case quote:
                index += 1
                return String(decoding: value, as: UTF8.self)
            case 0x3C:
                throw malformed("'<' in the value of attribute '\(Self.shown(name))'")
            case 0x26:
                try reference(into: &value)
            case 0x0D:
                value.append(0x20)
                index += 1
                if current == 0x0A { index += 1 }
            case 0x09, 0x0A:
                value.append(0x20)
                index += 1
            default:
                value.append(byte)
                index += 1
            }
            try checkValueLength(value, "value of attribute '\(Self.shown(name))'", at: start)
        }
    }

    /// Resolves names against the element's own scope and builds the finished element.
    private mutating func close(_ open: OpenElement, scope: [String: String]) throws(MetalinkError) -> XMLElement {
        func resolve(_ prefix: String?, element: Bool) -> String?? {
            guard let prefix else { return element ? .some(scope[""].flatMap { $0.isEmpty ? nil : $0 }) : .some(nil) }
            guard let uri = scope[prefix] else { return nil }
            return .some(uri)
        }
        guard let namespace = resolve(open.prefix, element: true) else {
            throw error(
                .unboundNamespacePrefix, at: open.start,
                "prefix '\(Self.shown(open.prefix ?? ""))' of <\(Self.shown(open.qualifiedName))> is not declared")
        }
        var attributes: [XMLAttribute] = []
        var expanded: Set<[String]> = []
        for raw in open.rawAttributes {
            guard let attributeNamespace = resolve(raw.prefix, element: false) else {
                throw error(
                    .unboundNamespacePrefix, at: open.start,
                    "prefix '\(Self.shown(raw.prefix ?? ""))' of attribute '\(Self.shown(raw.localName))' is not declared"
                )
            }
            guard expanded.insert([attributeNamespace ?? "", raw.localName]).inserted else {
                throw malformed(
                    at: open.start,
                    "attribute '\(Self.shown(raw.localName))' appears twice in one namespace on <\(Self.shown(open.qualifiedName))>"
                )
            }
            attributes.append(XMLAttribute(namespace: attributeNamespace, localName: raw.localName, value: raw.value))
        }
        return XMLElement(
            namespace: namespace, localName: open.localName, attributes: attributes, children: open.children,
            text: String(decoding: open.text, as: UTF8.self), line: open.line, column: open.column)
    }
}

extension WireError.Code {
    /// A `Content-Disposition` value has an unterminated quoted-string, a control byte, or a parameter
    /// that is not `token = value`.
    public static let malformedContentDisposition = WireError.Code("malformedContentDisposition")
}

/// The `Content-Disposition` response field (RFC 6266), with RFC 8187 extended parameters.
///
/// Names are decoded faithfully and never sanitised here: `../../etc/passwd` comes out as written.
/// Whoever turns a name into a path must sanitise it.
public struct ContentDisposition: Sendable, Hashable {
    /// One `name=value` parameter.
    public struct Parameter: Sendable, Hashable {
        /// The parameter name, lower-cased (names are case-insensitive, RFC 6266 §4.1).
        public var name: String
        /// The value: a token as given, or a quoted-string with its quoted-pairs resolved. For an
        /// extended parameter (name ending in `*`) this is the raw RFC 8187 `ext-value`.
        public var value: String

        /// Creates a parameter; `name` is lower-cased.
        public init(name: String, value: String) {
            self.name = name.lowercased()
            self.value = value
        }
    }

    /// The disposition type, lower-cased (`attachment`, `inline`, …); empty when the server sent
    /// parameters only.
    public var type: String
    /// The parameters, in order.
    public var parameters: [Parameter]

    /// Creates a value.
    public init(type: String, parameters: [Parameter] = []) {
        self.type = type.lowercased()
        self.parameters = parameters
    }

    /// Parses `disposition-type *( OWS ";" OWS disposition-parm )` (RFC 6266 §4.1).
    ///
    /// Tolerant: OWS around `=`, empty `;` elements, a missing type, parameters without `=` (ignored)
    /// and unquoted values containing spaces or non-ASCII text (taken up to the next `;`).
    /// - Parameter value: The field value.
    /// - Throws: ``WireError`` with code ``WireError/Code/malformedContentDisposition``.
    public init(parsing value: String) throws(WireError) {
        let code = WireError.Code.malformedContentDisposition
        var scanner = GrammarScanner(value)
        scanner.skipWhitespace()
        let typeStart = scanner.index
        var type = ""
        if let token = scanner.token() {
            var lookahead = scanner
            lookahead.skipWhitespace()
            if lookahead.current == 0x3D {
                scanner.index = typeStart  // parameters only: `filename="x"`
            } else {
                type = token.lowercased()
            }
        }
        var parameters: [Parameter] = []
        while true {
            scanner.skipWhitespace()
            if scanner.isAtEnd { break }
            if scanner.consume(0x3B) { continue }
            guard let name = scanner.token() else {
                throw WireError(code, offset: scanner.index, "expected a parameter name")
            }
            scanner.skipWhitespace()
            if scanner.consume(0x3D) {
                scanner.skipWhitespace()
                let parameterValue: String
                if scanner.current == 0x22 {
                    parameterValue = try scanner.quotedString(code)
                } else {
                    let start = scanner.index
                    let raw = scanner.consume { $0 != 0x3B }
                    if let bad = raw.utf8.firstIndex(where: GrammarCharacters.isForbiddenControl) {
                        let offset = start + raw.utf8.distance(from: raw.utf8.startIndex, to: bad)
                        throw WireError(code, offset: offset, "control byte in parameter value")
                    }
                    parameterValue = raw.trimmingHTTPWhitespace()
                }
                parameters.append(Parameter(name: name, value: parameterValue))
            }
            scanner.skipWhitespace()
            guard scanner.isAtEnd || scanner.consume(0x3B) else {
                throw WireError(code, offset: scanner.index, "expected ';' between parameters")
            }
        }
        self.type = type
        self.parameters = parameters
    }

    /// The value of the first parameter named `name` (case-insensitively), or `nil`.
    public func parameter(named name: String) -> String? {
        parameters.first { DKHTTPHeaders.namesEqual($0.name, name) }?.value
    }

    /// The `filename` parameter as sent.
    public var filename: String? { parameter(named: "filename") }

    /// The `filename*` parameter decoded per RFC 8187 §3.2 (UTF-8 or ISO-8859-1, percent-decoded),
    /// or `nil` when absent or undecodable (unknown charset, bad escape, invalid UTF-8).
    public var filenameStar: String? { parameter(named: "filename*").flatMap(Self.decodeExtendedValue) }

    /// The name to use: `filename*` when it decodes, else `filename` (RFC 6266 §4.3).
    public var preferredFilename: String? { filenameStar ?? filename }

    /// Whether the type is `attachment` (case-insensitively).
    public var isAttachment: Bool { type == "attachment" }

    /// The field value; values that are not tokens are written as quoted-strings with `"` and `\`
    /// escaped.
    public var headerValue: String {
        var text = type
        for (index, parameter) in parameters.enumerated() {
            if !(index == 0 && type.isEmpty) { text += "; " }
            text += parameter.name + "="
            if GrammarCharacters.isToken(parameter.value) {
                text += parameter.value
            } else {
                text += "\""
                for character in parameter.value.unicodeScalars {
                    if character == "\"" || character == "\\" { text += "\\" }
                    text.unicodeScalars.append(character)
                }
                text += "\""
            }
        }
        return text
    }

    /// Decodes an RFC 8187 §3.2.1 `ext-value`: `charset "'" [ language ] "'" value-chars`.
    /// - Parameter text: For example `UTF-8''%e2%82%ac%20rates` or `iso-8859-1'en'%A3%20rates`.
    /// - Returns: The decoded text, or `nil` for a charset other than UTF-8 or ISO-8859-1, a bad
    ///   percent-escape or invalid UTF-8.
    public static func decodeExtendedValue(_ text: String) -> String? {
        let parts = text.split(separator: "'", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, let bytes = try? PercentEncoding.decode(String(parts[2])) else { return nil }
        switch parts[0].lowercased() {
        case "utf-8":
            return String(validating: bytes, as: UTF8.self)
        case "iso-8859-1":
            // ISO-8859-1 maps each byte to the Unicode scalar of the same value.
            var decoded = ""
            decoded.unicodeScalars.append(contentsOf: bytes.map { Unicode.Scalar($0) })
            return decoded
        default:
            return nil
        }
    }
}

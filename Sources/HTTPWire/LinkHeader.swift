extension WireError.Code {
    /// A `Link` value is not in RFC 8288's grammar (a target not in `<…>`, a parameter that is not a token,
    /// an unterminated quoted-string, a missing `,` between links).
    public static let malformedLink = WireError.Code("malformedLink")
}

/// The `Link` field (RFC 8288 §3): typed links from the response to other resources. DownloadKit reads it
/// for RFC 6249 (Metalink/HTTP): `rel=duplicate` links name mirrors of the same file, and
/// `rel=describedby; type="application/metalink4+xml"` names a Metalink document describing it.
public struct LinkHeader: Sendable, Hashable {
    /// One link-value: a target and its parameters.
    public struct Link: Sendable, Hashable {
        /// The target URI reference exactly as written between `<` and `>`; a relative reference is resolved
        /// against the response's URL by the caller (RFC 8288 §3.1).
        public var target: String
        /// The parameters in order; names are lower-cased (they are case-insensitive), a value is `nil` for a
        /// parameter without `=` (RFC 6249's `pref`).
        public var parameters: [Parameter]

        /// Creates a link.
        public init(target: String, parameters: [Parameter]) {
            self.target = target
            self.parameters = parameters
        }

        /// The value of the first parameter named `name` (lower-case); only the first occurrence counts
        /// (RFC 8288 §3.3 for `rel`; the same rule for the others here). `nil` when absent or valueless.
        public func parameter(_ name: String) -> String? {
            parameters.first { $0.name == name }?.value
        }

        /// Whether a parameter named `name` (lower-case) is present, with or without a value.
        public func hasParameter(_ name: String) -> Bool { parameters.contains { $0.name == name } }

        /// The relation types of the first `rel` parameter, lower-cased and split on white space
        /// (`rel="duplicate describedby"` is two relations).
        public var relations: [String] {
            guard let rel = parameter("rel") else { return [] }
            return rel.utf8.split { $0 == 0x20 || $0 == 0x09 }.map {
                String(decoding: $0.map(asciiLower), as: UTF8.self)
            }
        }
    }

    /// One link parameter.
    public struct Parameter: Sendable, Hashable {
        /// The parameter name, lower-cased.
        public var name: String
        /// The value with quoting removed, or `nil` when the parameter has no `=`.
        public var value: String?

        /// Creates a parameter.
        public init(name: String, value: String?) {
            self.name = name
            self.value = value
        }
    }

    /// The links in field order.
    public var links: [Link]

    /// Creates a value from links.
    public init(links: [Link]) { self.links = links }

    /// Parses `Link = #link-value`, `link-value = "<" URI-Reference ">" *( OWS ";" OWS link-param )`,
    /// `link-param = token BWS [ "=" BWS ( token / quoted-string ) ]`. Commas and semicolons inside a
    /// quoted-string belong to the value. Empty list elements are ignored.
    /// - Parameter value: The field value (several `Link` fields joined with `", "` parse as one).
    /// - Throws: ``WireError`` with code ``WireError/Code/malformedLink``.
    public init(parsing value: String) throws(WireError) {
        var scanner = GrammarScanner(value)
        var links: [Link] = []
        while true {
            scanner.skipWhitespace()
            if scanner.isAtEnd { break }
            if scanner.consume(0x2C) { continue }
            guard scanner.consume(0x3C) else {
                throw WireError(.malformedLink, offset: scanner.index, "link target must start with '<'")
            }
            let targetStart = scanner.index
            let target = scanner.consume { $0 != 0x3E && $0 > 0x20 && $0 != 0x7F }
            guard scanner.consume(0x3E) else {
                throw WireError(
                    .malformedLink, offset: scanner.index,
                    "link target starting at byte \(targetStart) has no '>' (or holds white space or a control byte)")
            }
            var parameters: [Parameter] = []
            while true {
                scanner.skipWhitespace()
                guard scanner.consume(0x3B) else { break }
                scanner.skipWhitespace()
                guard let name = scanner.token() else {
                    throw WireError(.malformedLink, offset: scanner.index, "link parameter name is not a token")
                }
                scanner.skipWhitespace()
                var parameterValue: String?
                if scanner.consume(0x3D) {
                    scanner.skipWhitespace()
                    if scanner.current == 0x22 {
                        parameterValue = try scanner.quotedString(.malformedLink)
                    } else if let token = scanner.token() {
                        parameterValue = token
                    } else {
                        throw WireError(
                            .malformedLink, offset: scanner.index,
                            "value of link parameter '\(name)' is neither a token nor a quoted-string")
                    }
                }
                parameters.append(
                    Parameter(name: String(decoding: name.utf8.map(asciiLower), as: UTF8.self), value: parameterValue))
            }
            links.append(Link(target: target, parameters: parameters))
            guard scanner.isAtEnd || scanner.consume(0x2C) else {
                throw WireError(.malformedLink, offset: scanner.index, "expected ',' or ';' after a link")
            }
        }
        self.links = links
    }

    /// The `rel=duplicate` links as mirrors (RFC 6249 §3), best first: those marked `pref` before the others,
    /// then by `pri` ascending (a link without a valid `pri` after those with one), then in field order.
    public var duplicates: [DuplicateLink] {
        let mirrors = links.filter { $0.relations.contains("duplicate") }.map(DuplicateLink.init)
        return mirrors.enumerated().sorted { a, b in
            let left = (a.element.isPreferred ? 0 : 1, a.element.priority ?? Int.max, a.offset)
            let right = (b.element.isPreferred ? 0 : 1, b.element.priority ?? Int.max, b.offset)
            return left < right
        }.map(\.element)
    }

    /// The targets of `rel=describedby` links whose `type` is `application/metalink4+xml` (RFC 6249 §6):
    /// Metalink documents describing the response's file.
    public var metalinkDescriptions: [String] {
        links.filter { link in
            link.relations.contains("describedby")
                && link.parameter("type").map { DKHTTPHeaders.namesEqual($0, "application/metalink4+xml") } == true
        }.map(\.target)
    }

    /// The field value: each link as `<target>` and its parameters, values quoted, joined by `", "`.
    public var headerValue: String {
        links.map { link in
            "<\(link.target)>"
                + link.parameters.map { parameter in
                    guard let value = parameter.value else { return "; \(parameter.name)" }
                    return "; \(parameter.name)=" + GrammarCharacters.quotedString(value)
                }.joined()
        }.joined(separator: ", ")
    }
}

/// A mirror named by `Link: <url>; rel=duplicate` (RFC 6249 §3).
public struct DuplicateLink: Sendable, Hashable {
    /// The mirror's URI reference as written (resolve a relative one against the response's URL).
    public var url: String
    /// `pri`: 1–999999, lower is better. `nil` when absent or not a number in that range (the link is kept,
    /// its priority ignored).
    public var priority: Int?
    /// `geo`: the mirror's ISO 3166-1 alpha-2 country code, lower-cased; `nil` when absent or not two letters.
    public var location: String?
    /// `pref`: the server marks this mirror as preferred.
    public var isPreferred: Bool
    /// `depth`: how many path segments of the URL the mirror shares with the file's (RFC 6249 §3.2), when given.
    public var depth: Int?

    /// Creates a mirror.
    public init(url: String, priority: Int?, location: String?, isPreferred: Bool, depth: Int?) {
        self.url = url
        self.priority = priority
        self.location = location
        self.isPreferred = isPreferred
        self.depth = depth
    }

    /// Reads a link's RFC 6249 parameters.
    public init(_ link: LinkHeader.Link) {
        func number(_ name: String, in range: ClosedRange<Int>) -> Int? {
            guard let text = link.parameter(name), (1...6).contains(text.utf8.count),
                text.utf8.allSatisfy(GrammarCharacters.isDigit), let value = Int(text), range.contains(value)
            else { return nil }
            return value
        }
        let geo = link.parameter("geo").flatMap { text -> String? in
            let bytes = Array(text.utf8)
            guard bytes.count == 2, bytes.allSatisfy(GrammarCharacters.isAlpha) else { return nil }
            return String(decoding: bytes.map(asciiLower), as: UTF8.self)
        }
        self.init(
            url: link.target, priority: number("pri", in: 1...999_999), location: geo,
            isPreferred: link.hasParameter("pref"), depth: number("depth", in: 0...999_999))
    }
}

extension WireError.Code {
    /// A `WWW-Authenticate` value does not follow RFC 9110 §11.6.1's challenge grammar.
    public static let malformedChallenge = WireError.Code("malformedChallenge")
}

/// One parameter of an authentication challenge: a lower-cased name and its (unquoted) value.
public struct AuthParameter: Sendable, Hashable {
    /// The parameter name, lower-cased (names are case-insensitive, RFC 9110 §11.2).
    public var name: String
    /// The value, with quoted-string escapes removed.
    public var value: String

    /// Creates a parameter; `name` is lower-cased.
    public init(name: String, value: String) {
        self.name = name.lowercased()
        self.value = value
    }
}

/// One challenge from a `WWW-Authenticate` field (RFC 9110 §11.6.1):
/// `auth-scheme [ 1*SP ( token68 / #auth-param ) ]`.
public struct AuthChallenge: Sendable, Hashable {
    /// The scheme as sent (`Basic`, `Digest`); compare with ``isScheme(_:)``.
    public var scheme: String
    /// The token68 form's value, when the challenge used it instead of parameters.
    public var token68: String?
    /// The parameters in order.
    public var parameters: [AuthParameter]

    /// Creates a challenge.
    public init(scheme: String, token68: String? = nil, parameters: [AuthParameter] = []) {
        self.scheme = scheme
        self.token68 = token68
        self.parameters = parameters
    }

    /// Whether the scheme is `name`, compared case-insensitively.
    public func isScheme(_ name: String) -> Bool { scheme.lowercased() == name.lowercased() }

    /// The first value of the parameter `name` (case-insensitive), or `nil`.
    public func parameter(_ name: String) -> String? {
        let lowered = name.lowercased()
        return parameters.first { $0.name == lowered }?.value
    }

    /// Parses every challenge in one or more `WWW-Authenticate` values (several fields are parsed
    /// as if joined by commas, RFC 9110 §5.3).
    /// - Throws: ``WireError/Code/malformedChallenge`` naming the offending byte, for example an
    ///   unterminated quoted string, a parameter without a value, or a byte that is not a token.
    public static func parse(_ values: [String]) throws(WireError) -> [AuthChallenge] {
        var all: [AuthChallenge] = []
        for value in values { all += try parse(value) }
        return all
    }

    /// Parses every challenge in one `WWW-Authenticate` value.
    /// - Throws: ``WireError/Code/malformedChallenge``.
    public static func parse(_ value: String) throws(WireError) -> [AuthChallenge] {
        var scanner = ChallengeScanner(bytes: Array(value.utf8))
        return try scanner.challenges()
    }
}

/// The tokenizer behind ``AuthChallenge/parse(_:)-(String)``.
private struct ChallengeScanner {
    let bytes: [UInt8]
    var index = 0

    static func isToken68Byte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return Array("-._~+/".utf8).contains(byte)
        }
    }

    var atEnd: Bool { index >= bytes.count }

    mutating func skipWhitespace() {
        while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x09 { index += 1 }
    }

    /// Skips whitespace and list commas (empty list elements are allowed, RFC 9110 §5.6.1.2).
    mutating func skipSeparators() {
        while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x09 || bytes[index] == 0x2C { index += 1 }
    }

    mutating func token() -> String? {
        let start = index
        while index < bytes.count, HTTPByteClass.isTokenByte(bytes[index]) { index += 1 }
        return index > start ? String(decoding: bytes[start..<index], as: UTF8.self) : nil
    }

    func failure(_ detail: String) -> WireError {
        WireError(.malformedChallenge, offset: index, detail)
    }

    mutating func quotedString() throws(WireError) -> String {
        index += 1  // opening quote
        var value: [UInt8] = []
        while index < bytes.count {
            let byte = bytes[index]
            if byte == 0x22 {
                index += 1
                return String(decoding: value, as: UTF8.self)
            }
            if byte == 0x5C {
                index += 1
                guard index < bytes.count else { break }
            }
            // quoted-pair (RFC 9110 §5.6.4) escapes only HTAB, SP, VCHAR and obs-text: never a control byte.
            let literal = bytes[index]
            if GrammarCharacters.isForbiddenControl(literal) {
                throw failure("control byte \(literal) inside a quoted string")
            }
            value.append(bytes[index])
            index += 1
        }
        throw failure("unterminated quoted string")
    }

    /// Looks ahead from the current index (just after a token and optional whitespace) for `=` that
    /// starts a parameter value, as opposed to token68 padding.
    func isParameterAssignment() -> Bool {
        var probe = index
        guard probe < bytes.count, bytes[probe] == 0x3D else { return false }
        probe += 1
        while probe < bytes.count, bytes[probe] == 0x20 || bytes[probe] == 0x09 { probe += 1 }
        guard probe < bytes.count else { return false }
        return bytes[probe] == 0x22 || HTTPByteClass.isTokenByte(bytes[probe]) && bytes[probe] != 0x3D
    }

    mutating func challenges() throws(WireError) -> [AuthChallenge] {
        var result: [AuthChallenge] = []
        skipSeparators()
        while !atEnd {
            guard let scheme = token() else { throw failure("expected an authentication scheme") }
            var challenge = AuthChallenge(scheme: scheme)
            // The scheme must be followed by a space, a comma or the end.
            if !atEnd, bytes[index] != 0x20, bytes[index] != 0x09, bytes[index] != 0x2C {
                throw failure("unexpected byte after the scheme \(scheme)")
            }
            skipWhitespace()
            var first = true
            elements: while !atEnd {
                if bytes[index] == 0x2C {
                    skipSeparators()
                    first = false
                    continue
                }
                let mark = index
                // token68: a run of token68 bytes followed by "="* and then a comma or the end.
                if first {
                    var probe = index
                    while probe < bytes.count, Self.isToken68Byte(bytes[probe]) { probe += 1 }
                    var end = probe
                    while end < bytes.count, bytes[end] == 0x3D { end += 1 }
                    var after = end
                    while after < bytes.count, bytes[after] == 0x20 || bytes[after] == 0x09 { after += 1 }
                    if probe > index, after == bytes.count || bytes[after] == 0x2C {
                        let savedIndex = index
                        index = probe
                        skipWhitespace()
                        if !isParameterAssignment() {
                            challenge.token68 = String(decoding: bytes[savedIndex..<end], as: UTF8.self)
                            index = after
                            break elements
                        }
                        index = savedIndex
                    }
                }
                guard let name = token() else { throw failure("expected a parameter name") }
                skipWhitespace()
                guard isParameterAssignment() else {
                    // Not `name=value`: the next challenge starts here.
                    index = mark
                    break elements
                }
                index += 1  // "="
                skipWhitespace()
                let value: String
                if bytes[index] == 0x22 {
                    value = try quotedString()
                } else if let bare = token() {
                    value = bare
                } else {
                    throw failure("expected a token or a quoted string as the value of \(name)")
                }
                challenge.parameters.append(AuthParameter(name: name, value: value))
                skipWhitespace()
                guard atEnd || bytes[index] == 0x2C else { throw failure("expected a comma after the parameter \(name)") }
                first = false
            }
            result.append(challenge)
            skipSeparators()
        }
        return result
    }
}

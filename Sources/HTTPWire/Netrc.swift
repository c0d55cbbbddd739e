extension WireError.Code {
    /// A `.netrc` file does not follow the format (a keyword without its value, an unknown keyword,
    /// an unterminated quoted token, a NUL byte). The offset is the byte where the problem starts.
    public static let malformedNetrc = WireError.Code("malformedNetrc")
}

/// The entries of a `.netrc` file, as curl and ftp(1) read it.
///
/// Tokens are separated by white space (spaces, tabs, newlines); a token may be written in double
/// quotes with `\"`, `\\`, `\n`, `\r` and `\t` escapes. A line whose first non-blank byte is `#` is a
/// comment, and so is the rest of a line from a `#` where a keyword is expected; a value may start
/// with `#` (`password #secret`). Keywords: `machine NAME`, `default`, `login NAME`,
/// `password SECRET`, `account TEXT`, and `macdef NAME` whose body (up to the next empty line) is
/// skipped. Pure: parsing never reads a file.
public struct NetrcFile: Sendable, Hashable {
    /// One `machine` (or `default`) entry.
    public struct Entry: Sendable, Hashable {
        /// The host name, ASCII lower-cased; `nil` for the `default` entry.
        public var machine: String?
        /// The user name, if given.
        public var login: String?
        /// The password, if given.
        public var password: String?
        /// The account, if given (unused by HTTP).
        public var account: String?

        /// Creates an entry.
        public init(machine: String?, login: String? = nil, password: String? = nil, account: String? = nil) {
            self.machine = machine.map(asciiLowercased)
            self.login = login
            self.password = password
            self.account = account
        }
    }

    /// The entries in file order.
    public var entries: [Entry]

    /// Creates a file from entries.
    public init(entries: [Entry]) {
        self.entries = entries
    }

    /// Parses the text of a `.netrc` file.
    /// - Throws: ``WireError/Code/malformedNetrc`` naming the keyword or byte at fault.
    public init(parsing text: String) throws(WireError) {
        var tokenizer = NetrcTokenizer(bytes: Array(text.utf8))
        var entries: [Entry] = []
        var current: Entry?
        while let (keyword, offset) = try tokenizer.next() {
            func value() throws(WireError) -> String {
                guard let (value, _) = try tokenizer.next() else {
                    throw WireError(.malformedNetrc, offset: offset, "\(keyword) at the end of the file has no value")
                }
                return value
            }
            switch keyword {
            case "machine":
                if let current { entries.append(current) }
                current = Entry(machine: try value())
            case "default":
                if let current { entries.append(current) }
                current = Entry(machine: nil)
            case "login", "password", "account":
                guard current != nil else {
                    throw WireError(.malformedNetrc, offset: offset, "\(keyword) before any machine or default")
                }
                let text = try value()
                switch keyword {
                case "login": current?.login = text
                case "password": current?.password = text
                default: current?.account = text
                }
            case "macdef":
                _ = try value()
                tokenizer.skipMacroBody()
            default:
                // Where a keyword is expected, `#` starts a comment to the end of the line.
                guard keyword.hasPrefix("#") else {
                    throw WireError(.malformedNetrc, offset: offset, "unknown keyword \"\(keyword)\"")
                }
                tokenizer.skipToEndOfLine()
            }
        }
        if let current { entries.append(current) }
        self.entries = entries
    }

    /// The entry for `host`: the first `machine` whose name equals it (case-insensitively) and, when
    /// `login` is given, whose login equals it; else the `default` entry; else `nil`.
    public func entry(forHost host: String, login: String? = nil) -> Entry? {
        let lowered = asciiLowercased(host)
        if let match = entries.first(where: { $0.machine == lowered && (login == nil || $0.login == login) }) {
            return match
        }
        return entries.first { $0.machine == nil && (login == nil || $0.login == login) }
    }
}

/// Splits netrc text into tokens with their byte offsets.
struct NetrcTokenizer {
    let bytes: [UInt8]
    var index = 0
    /// Whether a token was read on the current line: `#` starts a comment only as a line's first
    /// non-blank byte (as curl reads it), so `password #secret` keeps its password.
    var lineHasToken = false

    static func isSpace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D }

    mutating func next() throws(WireError) -> (String, Int)? {
        while index < bytes.count {
            let byte = bytes[index]
            if Self.isSpace(byte) {
                if byte == 0x0A { lineHasToken = false }
                index += 1
            } else if byte == UInt8(ascii: "#") && !lineHasToken {
                while index < bytes.count, bytes[index] != 0x0A { index += 1 }
            } else {
                break
            }
        }
        guard index < bytes.count else { return nil }
        let start = index
        lineHasToken = true
        var token: [UInt8] = []
        if bytes[index] == 0x22 {
            index += 1
            while true {
                guard index < bytes.count else {
                    throw WireError(.malformedNetrc, offset: start, "unterminated quoted token")
                }
                var byte = bytes[index]
                index += 1
                if byte == 0x22 { break }
                if byte == 0x5C {
                    guard index < bytes.count else {
                        throw WireError(.malformedNetrc, offset: start, "unterminated quoted token")
                    }
                    let escaped = bytes[index]
                    index += 1
                    switch escaped {
                    case UInt8(ascii: "n"): byte = 0x0A
                    case UInt8(ascii: "r"): byte = 0x0D
                    case UInt8(ascii: "t"): byte = 0x09
                    default: byte = escaped
                    }
                }
                token.append(byte)
            }
        } else {
            while index < bytes.count, !Self.isSpace(bytes[index]) {
                token.append(bytes[index])
                index += 1
            }
        }
        guard !token.contains(0) else { throw WireError(.malformedNetrc, offset: start, "NUL byte in a token") }
        return (String(decoding: token, as: UTF8.self), start)
    }

    /// Skips the rest of the current line.
    mutating func skipToEndOfLine() {
        while index < bytes.count, bytes[index] != 0x0A { index += 1 }
    }

    /// Skips a `macdef` body: everything up to and including the next empty line.
    mutating func skipMacroBody() {
        // The body starts on the line after the macro name.
        while index < bytes.count, bytes[index] != 0x0A { index += 1 }
        if index < bytes.count { index += 1 }
        while index < bytes.count {
            var lineEnd = index
            while lineEnd < bytes.count, bytes[lineEnd] != 0x0A { lineEnd += 1 }
            let isEmpty = bytes[index..<lineEnd].allSatisfy { $0 == 0x0D }
            index = min(bytes.count, lineEnd + 1)
            if isEmpty { return }
        }
    }
}

/// `text` with only A-Z lower-cased: host names compare ASCII case-insensitively (RFC 4343), and
/// Unicode case mapping is not reversible (`ſ` upper-cases to `S`).
func asciiLowercased(_ text: String) -> String {
    String(decoding: text.utf8.map(asciiLower), as: UTF8.self)
}

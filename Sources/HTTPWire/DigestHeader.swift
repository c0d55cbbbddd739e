extension WireError.Code {
    /// A `Digest`, `Repr-Digest` or `Content-Digest` value is not in its grammar, or a digest of a known
    /// algorithm has the wrong length or is not in its encoding (base64, or hexadecimal where allowed).
    public static let malformedDigest = WireError.Code("malformedDigest")
}

/// A hash function a download can be checked with: the ones Metalink (RFC 5854 §4.2.7, the IANA "Hash
/// Function Textual Names" registry), `Digest` (RFC 3230) and the integrity fields (RFC 9530) share.
///
/// The raw value is the IANA textual name. ``DigestAlgorithm`` (the digests DownloadKit computes) names the same
/// functions by ``compactName``; this enum lives here because parsing needs no OpenSSL. Other algorithms
/// (UNIXsum, CRC32c, ADLER32, ed2k, tiger, …) have no case: every parser in this package ignores a digest it
/// cannot name, as RFC 3230 §4.3.2 and RFC 9530 §2 ask.
public enum HashAlgorithm: String, Sendable, Hashable, CaseIterable, Comparable {
    case md5 = "md5"
    case sha1 = "sha-1"
    case sha224 = "sha-224"
    case sha256 = "sha-256"
    case sha384 = "sha-384"
    case sha512 = "sha-512"

    /// Recognises an algorithm name case-insensitively: the IANA names (`sha-256`), the dashless
    /// spellings Metalink 3 documents use (`sha256`, `sha1`), and RFC 3230's `SHA` (SHA-1).
    /// - Returns: `nil` for any other name.
    public init?(name: some StringProtocol) {
        let lowered = String(decoding: name.utf8.map(asciiLower), as: UTF8.self)
        switch lowered {
        case "md5": self = .md5
        case "sha", "sha1", "sha-1": self = .sha1
        case "sha224", "sha-224": self = .sha224
        case "sha256", "sha-256": self = .sha256
        case "sha384", "sha-384": self = .sha384
        case "sha512", "sha-512": self = .sha512
        default: return nil
        }
    }

    /// The name without its dash (`sha256`): how Metalink 3 documents write it, and the raw value of
    /// ``DigestAlgorithm`` for the same function.
    public var compactName: String { rawValue.replacing("-", with: "") }

    /// The length of a digest, in bytes.
    public var byteCount: Int {
        switch self {
        case .md5: 16
        case .sha1: 20
        case .sha224: 28
        case .sha256: 32
        case .sha384: 48
        case .sha512: 64
        }
    }

    /// Ordered weakest first (MD5 < SHA-1 < … < SHA-512), so `max()` picks the one to check with.
    public static func < (lhs: HashAlgorithm, rhs: HashAlgorithm) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
}

/// One digest of a representation or a file: an algorithm and its output bytes, of the algorithm's length.
public struct HashDigest: Sendable, Hashable, CustomStringConvertible {
    /// The hash function.
    public let algorithm: HashAlgorithm
    /// The digest, exactly ``HashAlgorithm/byteCount`` bytes.
    public let bytes: [UInt8]

    /// Creates a digest.
    /// - Throws: ``WireError`` with code ``WireError/Code/malformedDigest`` when `bytes` is not the
    ///   algorithm's length.
    public init(algorithm: HashAlgorithm, bytes: [UInt8]) throws(WireError) {
        guard bytes.count == algorithm.byteCount else {
            throw WireError(
                .malformedDigest, offset: 0,
                "\(algorithm.rawValue) digest has \(bytes.count) bytes, not \(algorithm.byteCount)")
        }
        self.algorithm = algorithm
        self.bytes = bytes
    }

    /// Creates a digest from hexadecimal digits (either case), as Metalink documents and `sha256sum` give it.
    /// - Throws: ``WireError`` with code ``WireError/Code/malformedDigest`` naming a non-hex digit or the
    ///   wrong number of digits.
    public init(algorithm: HashAlgorithm, hex: some StringProtocol) throws(WireError) {
        let digits = Array(hex.utf8)
        guard digits.count == algorithm.byteCount * 2 else {
            throw WireError(
                .malformedDigest, offset: 0,
                "\(algorithm.rawValue) digest has \(digits.count) hex digits, not \(algorithm.byteCount * 2)")
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(algorithm.byteCount)
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let high = PercentEncoding.hexValue(digits[index]),
                let low = PercentEncoding.hexValue(digits[index + 1])
            else {
                let bad = PercentEncoding.hexValue(digits[index]) == nil ? index : index + 1
                throw WireError(
                    .malformedDigest, offset: bad, "\(algorithm.rawValue) digest: byte \(bad) is not a hex digit")
            }
            bytes.append(high << 4 | low)
        }
        try self.init(algorithm: algorithm, bytes: bytes)
    }

    /// The digest as lower-case hexadecimal digits.
    public var hex: String {
        let digits = Array("0123456789abcdef".utf8)
        return String(decoding: bytes.flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 0x0F)]] }, as: UTF8.self)
    }

    /// The digest in padded base64 (as `Digest` and the integrity fields carry it).
    public var base64: String { Base64.encode(bytes) }

    public var description: String { "\(algorithm.rawValue):\(hex)" }
}

/// The `Digest` field (RFC 3230 §4.3.2, the form RFC 6249 §4 sends): `Digest: SHA-256=base64, MD5=base64`.
///
/// Algorithm names are case-insensitive; a digest of an algorithm ``HashAlgorithm`` cannot name is
/// ignored (UNIXsum, CRC32c, …). Empty list elements are ignored. A digest whose value is exactly twice
/// the algorithm's length in hexadecimal digits is accepted too (some servers send `md5sum`'s form; base64
/// of the same digest is never that long, so the two cannot be confused).
public struct DigestHeader: Sendable, Hashable {
    /// The digests of known algorithms, in field order.
    public var digests: [HashDigest]

    /// Creates a value from digests.
    public init(digests: [HashDigest]) { self.digests = digests }

    /// Parses `Digest = 1#instance-digest`, `instance-digest = digest-algorithm "=" encoded-digest`.
    /// - Parameter value: The field value (several fields joined with `", "` parse as one).
    /// - Throws: ``WireError`` with code ``WireError/Code/malformedDigest`` when an element is not
    ///   `token=value`, or a known algorithm's value does not decode to its length.
    public init(parsing value: String) throws(WireError) {
        var scanner = GrammarScanner(value)
        var digests: [HashDigest] = []
        while true {
            scanner.skipWhitespace()
            if scanner.isAtEnd { break }
            if scanner.consume(0x2C) { continue }
            let start = scanner.index
            guard let name = scanner.token(), scanner.consume(0x3D) else {
                throw WireError(.malformedDigest, offset: scanner.index, "expected algorithm=value")
            }
            // base64 holds '=' (a tchar) but never ',' or whitespace.
            let encoded = scanner.consume { $0 != 0x2C && $0 != 0x20 && $0 != 0x09 }
            if let algorithm = HashAlgorithm(name: name) {
                digests.append(try Self.decode(encoded, as: algorithm, at: start))
            }
            scanner.skipWhitespace()
            guard scanner.isAtEnd || scanner.consume(0x2C) else {
                throw WireError(.malformedDigest, offset: scanner.index, "expected ',' between digests")
            }
        }
        self.digests = digests
    }

    private static func decode(_ text: String, as algorithm: HashAlgorithm, at offset: Int) throws(WireError)
        -> HashDigest
    {
        if text.utf8.count == algorithm.byteCount * 2, let digest = try? HashDigest(algorithm: algorithm, hex: text) {
            return digest
        }
        let bytes: [UInt8]
        do {
            bytes = try Base64.decode(text)
        } catch {
            throw WireError(
                .malformedDigest, offset: offset, "\(algorithm.rawValue) value is not base64: \(error.detail)")
        }
        do {
            return try HashDigest(algorithm: algorithm, bytes: bytes)
        } catch {
            throw WireError(.malformedDigest, offset: offset, error.detail)
        }
    }

    /// The field value: `sha-256=base64` elements joined by `", "` (RFC 3230's names are case-insensitive).
    public var headerValue: String {
        digests.map { "\($0.algorithm.rawValue)=\($0.base64)" }.joined(separator: ", ")
    }
}

/// The integrity fields `Repr-Digest` and `Content-Digest` (RFC 9530 §2, §3): a structured-field
/// dictionary (RFC 8941 §3.2) of algorithm keys to byte sequences, `sha-256=:base64:, sha-512=:base64:`.
///
/// Keys of algorithms ``HashAlgorithm`` cannot name are ignored whatever their value (the dictionary
/// is still parsed whole: RFC 8941 §4.2 fails the whole field on a syntax error). Parameters are allowed
/// and ignored. A duplicate key keeps its last value (RFC 8941 §4.2.2).
public struct IntegrityDigestHeader: Sendable, Hashable {
    /// The digests of known algorithms, in the order their keys first appear.
    public var digests: [HashDigest]

    /// Creates a value from digests.
    public init(digests: [HashDigest]) { self.digests = digests }

    /// Parses the dictionary.
    /// - Parameter value: The field value (several fields joined with `", "` parse as one).
    /// - Throws: ``WireError`` with code ``WireError/Code/malformedDigest`` on structured-field syntax
    ///   errors, and when a known algorithm's value is not a byte sequence of its length.
    public init(parsing value: String) throws(WireError) {
        var scanner = StructuredFieldScanner(value)
        var digests: [HashDigest] = []
        scanner.skipSpaces()
        while !scanner.isAtEnd {
            let start = scanner.index
            let key = try scanner.key()
            var bytes: [UInt8]?
            if scanner.consume(0x3D) {
                bytes = try scanner.memberValue()
            } else {
                bytes = nil  // a bare key is the boolean true
            }
            try scanner.parameters()
            if let algorithm = HashAlgorithm(name: key) {
                guard let bytes else {
                    throw WireError(.malformedDigest, offset: start, "\(key) has no byte-sequence value")
                }
                let digest: HashDigest
                do { digest = try HashDigest(algorithm: algorithm, bytes: bytes) } catch {
                    throw WireError(.malformedDigest, offset: start, error.detail)
                }
                if let existing = digests.firstIndex(where: { $0.algorithm == algorithm }) {
                    digests[existing] = digest
                } else {
                    digests.append(digest)
                }
            }
            scanner.skipOptionalWhitespace()
            if scanner.isAtEnd { break }
            guard scanner.consume(0x2C) else {
                throw WireError(.malformedDigest, offset: scanner.index, "expected ',' between dictionary members")
            }
            scanner.skipOptionalWhitespace()
            guard !scanner.isAtEnd else {
                throw WireError(.malformedDigest, offset: scanner.index, "trailing ',' in dictionary")
            }
        }
        self.digests = digests
    }

    /// The field value: `sha-256=:base64:` members joined by `", "`.
    public var headerValue: String {
        digests.map { "\($0.algorithm.rawValue)=:\($0.base64):" }.joined(separator: ", ")
    }
}

/// The parts of RFC 8941's parsing algorithms (§4.2) an integrity field needs: dictionary keys, bare items,
/// inner lists and parameters. Values other than byte sequences are checked and dropped.
struct StructuredFieldScanner {
    private var base: GrammarScanner

    init(_ text: String) { base = GrammarScanner(text) }

    var index: Int { base.index }
    var isAtEnd: Bool { base.isAtEnd }
    mutating func consume(_ byte: UInt8) -> Bool { base.consume(byte) }

    mutating func skipSpaces() { while base.current == 0x20 { base.index += 1 } }
    mutating func skipOptionalWhitespace() { base.skipWhitespace() }

    private func fail(_ detail: String) -> WireError { WireError(.malformedDigest, offset: base.index, detail) }

    /// key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )
    mutating func key() throws(WireError) -> String {
        guard let first = base.current, (0x61...0x7A).contains(first) || first == 0x2A else {
            throw fail("dictionary key must start with a lower-case letter or '*'")
        }
        return base.consume { byte in
            (0x61...0x7A).contains(byte) || GrammarCharacters.isDigit(byte) || byte == 0x5F || byte == 0x2D
                || byte == 0x2E || byte == 0x2A
        }
    }

    /// member-value = sf-item / inner-list. Returns the bytes when the value is a byte sequence.
    mutating func memberValue() throws(WireError) -> [UInt8]? {
        if base.consume(0x28) {
            while true {
                skipSpaces()
                if base.consume(0x29) { break }
                _ = try bareItem()
                try parameters()
                guard base.current == 0x20 || base.current == 0x29 else {
                    throw fail("inner list item not followed by ' ' or ')'")
                }
            }
            return nil
        }
        return try bareItem()
    }

    /// parameters = *( ";" *SP key [ "=" bare-item ] )
    mutating func parameters() throws(WireError) {
        while base.consume(0x3B) {
            skipSpaces()
            _ = try key()
            if base.consume(0x3D) { _ = try bareItem() }
        }
    }

    /// bare-item = integer / decimal / string / token / byte-sequence / boolean. Returns a byte sequence's bytes.
    mutating func bareItem() throws(WireError) -> [UInt8]? {
        guard let first = base.current else { throw fail("missing value") }
        switch first {
        case 0x3A:  // byte sequence
            base.index += 1
            let text = base.consume { $0 != 0x3A }
            guard base.consume(0x3A) else { throw fail("unterminated byte sequence") }
            do { return try Base64.decode(text) } catch { throw fail("byte sequence is not base64: \(error.detail)") }
        case 0x22:  // string: printable ASCII, \" and \\ only
            base.index += 1
            while let byte = base.current {
                base.index += 1
                if byte == 0x22 { return nil }
                if byte == 0x5C {
                    guard base.current == 0x22 || base.current == 0x5C else { throw fail("bad escape in string") }
                    base.index += 1
                } else if byte < 0x20 || byte > 0x7E {
                    throw fail("byte \(byte) in string")
                }
            }
            throw fail("unterminated string")
        case 0x3F:  // boolean
            base.index += 1
            guard base.consume(0x30) || base.consume(0x31) else { throw fail("boolean is not ?0 or ?1") }
            return nil
        case 0x2D, 0x30...0x39:  // integer or decimal
            _ = base.consume(0x2D)
            let integer = base.consume(while: GrammarCharacters.isDigit)
            guard (1...15).contains(integer.utf8.count) else { throw fail("integer has \(integer.utf8.count) digits") }
            if base.consume(0x2E) {
                let fraction = base.consume(while: GrammarCharacters.isDigit)
                guard (1...3).contains(fraction.utf8.count), integer.utf8.count <= 12 else { throw fail("bad decimal") }
            }
            return nil
        case 0x2A, 0x41...0x5A, 0x61...0x7A:  // token
            _ = base.consume { GrammarCharacters.isTokenCharacter($0) || $0 == 0x3A || $0 == 0x2F }
            return nil
        default:
            throw fail("byte \(first) cannot start a value")
        }
    }
}

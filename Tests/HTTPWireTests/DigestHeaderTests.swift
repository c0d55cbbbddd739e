import Testing

@testable import HTTPWire

@Suite struct DigestHeaderTests {
    static let md5Empty = "d41d8cd98f00b204e9800998ecf8427e"
    static let sha1Empty = "da39a3ee5e6b4b0d3255bfef95601890afd80709"
    static let sha256Empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    static let sha256Hello = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"

    @Test(
        arguments: [
            ("sha-256", HashAlgorithm.sha256), ("SHA-256", .sha256), ("sha256", .sha256), ("SHA", .sha1),
            ("sha1", .sha1),
            ("Sha-1", .sha1), ("MD5", .md5), ("sha-512", .sha512), ("sha384", .sha384), ("sha-224", .sha224),
        ] as [(String, HashAlgorithm)])
    func namesAlgorithms(_ name: String, _ algorithm: HashAlgorithm) {
        #expect(HashAlgorithm(name: name) == algorithm)
        #expect(HashAlgorithm(name: algorithm.rawValue) == algorithm)
        #expect(HashAlgorithm(name: algorithm.compactName) == algorithm)
    }

    @Test(arguments: ["", "sha3-256", "UNIXsum", "crc32c", "sha-2", "md-5", "sha 256"])
    func unknownAlgorithmNamesAreNil(_ name: String) {
        #expect(HashAlgorithm(name: name) == nil)
    }

    @Test func strongestIsLargest() {
        #expect(HashAlgorithm.allCases.max() == .sha512)
        #expect(HashAlgorithm.md5 < .sha1 && HashAlgorithm.sha1 < .sha256)
    }

    /// RFC 3230 `Digest` (RFC 6249 §4's example form), with odd spacing, several fields joined, unknown algorithms.
    @Test(
        arguments: [
            ("SHA-256=47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=", [("sha-256", sha256Empty)]),
            ("sha-256=LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=", [("sha-256", sha256Hello)]),
            (
                "MD5=1B2M2Y8AsgTpgAmY7PhCfg==,SHA=2jmj7l5rSw0yVb/vlWAYkK/YBwk=",
                [("md5", md5Empty), ("sha-1", sha1Empty)]
            ),
            ("  UNIXsum=30637 , SHA-256=47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\t,, ", [("sha-256", sha256Empty)]),
            ("CRC32c=AAAAAA==, ADLER32=00000001", []),
            ("", []),
            (" , ", []),
            // md5sum's hexadecimal form, which some servers send.
            ("md5=d41d8cd98f00b204e9800998ecf8427e", [("md5", md5Empty)]),
        ] as [(String, [(String, String)])])
    func parsesDigest(_ value: String, _ expected: [(String, String)]) throws {
        let header = try DigestHeader(parsing: value)
        #expect(header.digests.map(\.algorithm.rawValue) == expected.map(\.0))
        #expect(header.digests.map(\.hex) == expected.map(\.1))
        #expect(try DigestHeader(parsing: header.headerValue) == header)
    }

    @Test(arguments: [
        "SHA-256", "=abc", "SHA-256 =47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
        "SHA-256=47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU", "MD5=1B2M2Y8AsgTpgAmY7PhCfg==extra",
        "SHA-256=2jmj7l5rSw0yVb/vlWAYkK/YBwk=", "MD5=1B2M2Y8AsgTpgAmY7PhCfg== junk",
        "md5=d41d8cd98f00b204e9800998ecf8427g",
    ])
    func rejectsMalformedDigest(_ value: String) {
        #expect {
            try DigestHeader(parsing: value)
        } throws: { error in
            (error as? WireError)?.code == .malformedDigest
        }
    }

    /// RFC 9530 `Repr-Digest` / `Content-Digest` dictionaries (its §2 and appendix examples), parameters and
    /// members of other types, and keys of unknown algorithms ignored.
    @Test(
        arguments: [
            ("sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:", [("sha-256", sha256Empty)]),
            (
                "sha-512=:z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUdBeoGlODJ6+SfaPg==:,  sha-256=:LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=:",
                [
                    (
                        "sha-512",
                        "cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e"
                    ),
                    ("sha-256", sha256Hello),
                ]
            ),
            ("unixsum=30637, sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:;q=1", [("sha-256", sha256Empty)]),
            ("adler=\"x,y\", crc32c=:AAAAAA==:, x=(1 2 \"a\");p, y=?1, z, w=1.5, v=tok/en:x", []),
            ("md5=:1B2M2Y8AsgTpgAmY7PhCfg==:, md5=:1B2M2Y8AsgTpgAmY7PhCfg==:", [("md5", md5Empty)]),
            ("", []),
        ] as [(String, [(String, String)])])
    func parsesIntegrityFields(_ value: String, _ expected: [(String, String)]) throws {
        let header = try IntegrityDigestHeader(parsing: value)
        #expect(header.digests.map(\.algorithm.rawValue) == expected.map(\.0))
        #expect(header.digests.map(\.hex) == expected.map(\.1))
        #expect(try IntegrityDigestHeader(parsing: header.headerValue) == header)
    }

    @Test(arguments: [
        "sha-256=47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",  // a token, not a byte sequence
        "sha-256", "sha-256=:2jmj7l5rSw0yVb/vlWAYkK/YBwk=:",  // bare key; wrong length
        "SHA-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:",  // keys are lower-case
        "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:,", "sha-256=:47DEQpj8HBSa", "a=\"unterminated",
        "a=(1 2", "a=?2", "a=1234567890123456", "a=1.2345", "a=:!!:",
        "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=: x",
    ])
    func rejectsMalformedIntegrityFields(_ value: String) {
        #expect {
            try IntegrityDigestHeader(parsing: value)
        } throws: { error in
            (error as? WireError)?.code == .malformedDigest
        }
    }

    @Test func hexDigestsCheckDigitsAndLength() throws {
        let digest = try HashDigest(algorithm: .sha256, hex: Self.sha256Empty.uppercased())
        #expect(digest.hex == Self.sha256Empty)
        #expect(digest.base64 == "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=")
        #expect(throws: WireError.self) { try HashDigest(algorithm: .sha256, hex: Self.md5Empty) }
        #expect(throws: WireError.self) { try HashDigest(algorithm: .md5, hex: "d41d8cd98f00b204e9800998ecf8427x") }
        #expect(throws: WireError.self) { try HashDigest(algorithm: .md5, bytes: [1, 2, 3]) }
    }
}

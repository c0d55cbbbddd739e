import Testing

@testable import HTTPWire

@Suite struct Base64Tests {
    /// RFC 4648 §10 test vectors.
    @Test(arguments: [
        ("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ])
    func encodesAndDecodesRFC4648Vectors(_ plain: String, _ encoded: String) throws {
        #expect(Base64.encode(Array(plain.utf8)) == encoded)
        #expect(try Base64.decode(encoded) == Array(plain.utf8))
    }

    @Test func roundTripsEveryByteValue() throws {
        let bytes = (0...255).map { UInt8($0) }
        for length in 0...bytes.count where length % 37 == 0 || length < 5 {
            let slice = Array(bytes.prefix(length))
            #expect(try Base64.decode(Base64.encode(slice)) == slice)
        }
        #expect(Base64.encode([0xFB, 0xFF]) == "+/8=")
    }

    @Test(arguments: ["Zg=", "Zg", "Z===", "Zh==", "Zm9=", "Zm9v YmFy", "Zm=v", "Zm9vYmFy====", "Zg==Zg==", "=Zg=",
        "Zm9v\n", "Zm9-", "\u{FF}\u{FF}\u{FF}\u{FF}", "Zm_v"])
    func rejectsNonCanonicalText(_ input: String) {
        #expect {
            try Base64.decode(input)
        } throws: { error in
            (error as? WireError)?.code == .malformedBase64
        }
    }
}

import Testing

@testable import HTTPWire

@Suite struct PercentEncodingTests {
    @Test(arguments: [
        ("a%20b", Array("a b".utf8)), ("%e2%82%AC", [0xE2, 0x82, 0xAC]), ("plain", Array("plain".utf8)), ("", []),
        ("%00", [0]), ("%2F%2f", Array("//".utf8)),
    ] as [(String, [UInt8])])
    func decodesEscapes(_ input: String, _ expected: [UInt8]) throws {
        #expect(try PercentEncoding.decode(input) == expected)
        #expect(PercentEncoding.decodeLeniently(input) == expected)
    }

    @Test(arguments: ["%", "%2", "%zz", "a%g0", "100%"])
    func strictDecodingRejectsBadEscapesLenientKeepsThem(_ input: String) {
        #expect {
            try PercentEncoding.decode(input)
        } throws: { error in
            (error as? WireError)?.code == .malformedPercentEncoding
        }
        #expect(PercentEncoding.decodeLeniently(input) == Array(input.utf8))
    }

    @Test(arguments: [
        ("/caf\u{E9}", "/caf%C3%A9"), ("/a%20b?x=1", "/a%20b?x=1"), ("/\u{20AC}", "/%E2%82%AC"), ("", ""),
    ])
    func encodesOnlyNonASCII(_ input: String, _ expected: String) {
        #expect(PercentEncoding.encodeNonASCII(input) == expected)
    }

    @Test func userinfoEncodingEscapesDelimitersAndKeepsSubDelims() throws {
        let encoded = PercentEncoding.encodeUserinfoComponent("a:b@c/d?e#f %g!$&'()*+,;=~")
        #expect(encoded == "a%3Ab%40c%2Fd%3Fe%23f%20%25g!$&'()*+,;=~")
        #expect(try PercentEncoding.decode(encoded) == Array("a:b@c/d?e#f %g!$&'()*+,;=~".utf8))
    }
}

import Testing

@testable import HTTPWire

@Suite struct AcceptRangesTests {
    @Test(arguments: [
        ("bytes", ["bytes"], true, false),
        ("Bytes", ["Bytes"], true, false),
        ("none", ["none"], false, true),
        ("NONE", ["NONE"], false, true),
        ("bytes, other", ["bytes", "other"], true, false),
        (" other ,, bytes ", ["other", "bytes"], true, false),
        ("", [], false, false),
        ("other", ["other"], false, false),
    ] as [(String, [String], Bool, Bool)])
    func parsesUnits(_ input: String, _ units: [String], _ acceptsBytes: Bool, _ isNone: Bool) throws {
        let value = try AcceptRanges(parsing: input)
        #expect(value.units == units)
        #expect(value.acceptsBytes == acceptsBytes)
        #expect(value.isNone == isNone)
        #expect(try AcceptRanges(parsing: value.headerValue) == value)
    }

    @Test(arguments: ["bytes none", "by/tes", "\"bytes\"", "bytes\r\n", "bytes;q=1"])
    func rejectsNonTokens(_ input: String) {
        #expect {
            try AcceptRanges(parsing: input)
        } throws: { error in
            (error as? WireError)?.code == .malformedAcceptRanges
        }
    }
}

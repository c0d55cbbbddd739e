import Testing

@testable import HTTPWire

@Suite struct ContentMD5Tests {
    /// MD5 of the empty string.
    static let emptyDigest: [UInt8] = [
        0xD4, 0x1D, 0x8C, 0xD9, 0x8F, 0x00, 0xB2, 0x04, 0xE9, 0x80, 0x09, 0x98, 0xEC, 0xF8, 0x42, 0x7E,
    ]

    @Test(arguments: ["1B2M2Y8AsgTpgAmY7PhCfg==", " 1B2M2Y8AsgTpgAmY7PhCfg== ", "1B2M2Y8AsgTpgAmY7PhCfg",
        "d41d8cd98f00b204e9800998ecf8427e", "D41D8CD98F00B204E9800998ECF8427E"])
    func parsesBase64AndTolerableForms(_ input: String) throws {
        let value = try ContentMD5(parsing: input)
        #expect(value.digest == Self.emptyDigest)
        #expect(value.headerValue == "1B2M2Y8AsgTpgAmY7PhCfg==")
        #expect(value.hexString == "d41d8cd98f00b204e9800998ecf8427e")
    }

    @Test(arguments: ["", "1B2M2Y8AsgTpgAmY7PhC", "QUJD", "!!!!", "1B2M2Y8AsgTpgAmY7PhCfg=", "1B2M2Y8AsgTpgAmY7PhCfh==",
        "d41d8cd98f00b204e9800998ecf8427", "1B2M2Y8AsgTpgAmY7PhCfgAA"])
    func rejectsWrongLengthsAndBadBase64(_ input: String) {
        #expect {
            try ContentMD5(parsing: input)
        } throws: { error in
            (error as? WireError)?.code == .malformedContentMD5
        }
    }
}

import Testing

@testable import HTTPWire

@Suite struct EntityTagTests {
    @Test(arguments: [
        ("\"xyzzy\"", "xyzzy", false),
        ("W/\"xyzzy\"", "xyzzy", true),
        ("\"\"", "", false),
        ("w/\"x\"", "x", true),
        ("  \"5e1f-1a2b3c\"  ", "5e1f-1a2b3c", false),
        ("\"a b\"", "a b", false),
        ("abc123", "abc123", false),
        ("W/abc", "abc", true),
        ("\"caf\u{E9}\"", "caf\u{E9}", false),
    ] as [(String, String, Bool)])
    func parsesEntityTags(_ input: String, _ opaque: String, _ isWeak: Bool) throws {
        let tag = try EntityTag(parsing: input)
        #expect(tag.opaque == opaque)
        #expect(tag.isWeak == isWeak)
        #expect(try EntityTag(parsing: tag.headerValue) == tag)
    }

    @Test(arguments: [
        "", "   ", "W/", "\"abc", "\"a\"b", "\"a\" \"b\"", "abc\r\nX-Injected: 1", "a\0b", "\"a\nb\"", "a b",
        "ab\"c",
    ])
    func rejectsMalformedEntityTags(_ input: String) {
        #expect {
            try EntityTag(parsing: input)
        } throws: { error in
            (error as? WireError)?.code == .malformedETag
        }
    }

    /// RFC 9110 §8.8.3.2, the comparison table.
    @Test(arguments: [
        ("W/\"1\"", "W/\"1\"", false, true),
        ("W/\"1\"", "W/\"2\"", false, false),
        ("W/\"1\"", "\"1\"", false, true),
        ("\"1\"", "\"1\"", true, true),
    ] as [(String, String, Bool, Bool)])
    func comparesLikeRFC9110(_ first: String, _ second: String, _ strong: Bool, _ weak: Bool) throws {
        let a = try EntityTag(parsing: first)
        let b = try EntityTag(parsing: second)
        #expect(a.strongMatches(b) == strong)
        #expect(b.strongMatches(a) == strong)
        #expect(a.weakMatches(b) == weak)
        #expect(b.weakMatches(a) == weak)
    }

    @Test func serialisesWithQuotesAndWeakPrefix() {
        #expect(EntityTag(opaque: "abc").headerValue == "\"abc\"")
        #expect(EntityTag(opaque: "abc", isWeak: true).headerValue == "W/\"abc\"")
    }
}

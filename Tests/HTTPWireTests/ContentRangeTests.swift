import Testing

@testable import HTTPWire

@Suite struct ContentRangeTests {
    static let valid: [(String, ContentRange)] = [
        ("bytes 0-499/1234", .satisfied(first: 0, last: 499, completeLength: 1234)),
        ("bytes 500-999/*", .satisfied(first: 500, last: 999, completeLength: nil)),
        ("bytes */1234", .unsatisfied(completeLength: 1234)),
        ("bytes */0", .unsatisfied(completeLength: 0)),
        ("bytes 42-42/43", .satisfied(first: 42, last: 42, completeLength: 43)),
        // Spellings curl accepts.
        ("bytes=0-499/1234", .satisfied(first: 0, last: 499, completeLength: 1234)),
        ("bytes0-499/1234", .satisfied(first: 0, last: 499, completeLength: 1234)),
        ("bytes: 0-499/1234", .satisfied(first: 0, last: 499, completeLength: 1234)),
        ("BYTES 0-499/1234", .satisfied(first: 0, last: 499, completeLength: 1234)),
        ("  bytes \t 0 - 499 / 1234  ", .satisfied(first: 0, last: 499, completeLength: 1234)),
        ("0-499/1234", .satisfied(first: 0, last: 499, completeLength: 1234)),
        ("bytes * / 7", .unsatisfied(completeLength: 7)),
        (
            "bytes 0-9223372036854775806/9223372036854775807",
            .satisfied(first: 0, last: Int64.max - 1, completeLength: Int64.max)
        ),
    ]

    @Test(arguments: valid)
    func parsesContentRangeValues(_ input: String, _ expected: ContentRange) throws {
        let range = try ContentRange(parsing: input)
        #expect(range == expected)
        #expect(try ContentRange(parsing: range.headerValue) == range)
    }

    @Test(arguments: [
        "bytes 0-99999999999999999999/100",
        "bytes 0-5/99999999999999999999",
        "bytes */99999999999999999999",
        "bytes 500-499/1234",
        "bytes 0-1234/1234",
        "bytes 0-0/0",
        "bytes -1-5/10",
        "bytes 0--5/10",
        "items 0-1/2",
        "bytes 0-/10",
        "bytes -5/10",
        "bytes 0-5",
        "bytes */*",
        "bytes 0-5/10 extra",
        "bytes 0-5/10,bytes 0-5/10",
        "bytes 1-2/3x",
        "bytes 0-9223372036854775807/*",
        "",
        "bytes",
        "bytes 0-5/-10",
    ])
    func rejectsMalformedOrImpossibleRanges(_ input: String) {
        #expect {
            try ContentRange(parsing: input)
        } throws: { error in
            (error as? WireError)?.code == .malformedContentRange
        }
    }

    @Test func lengthAndCompleteLength() throws {
        let part = try ContentRange(parsing: "bytes 500-999/1234")
        #expect(part.length == 500)
        #expect(part.completeLength == 1234)
        #expect(ContentRange.unsatisfied(completeLength: 9).length == nil)
        #expect(ContentRange.unsatisfied(completeLength: 9).completeLength == 9)
        #expect(ContentRange.satisfied(first: 0, last: Int64.max, completeLength: nil).length == nil)
        #expect(ContentRange.satisfied(first: 5, last: 4, completeLength: nil).length == nil)
    }

    @Test func serialisesCanonically() {
        #expect(ContentRange.satisfied(first: 0, last: 9, completeLength: 10).headerValue == "bytes 0-9/10")
        #expect(ContentRange.satisfied(first: 0, last: 9, completeLength: nil).headerValue == "bytes 0-9/*")
        #expect(ContentRange.unsatisfied(completeLength: 10).headerValue == "bytes */10")
    }
}

import Testing

@testable import HTTPWire

@Suite struct ByteRangeTests {
    static let valid: [(String, [ByteRangeSpec])] = [
        ("bytes=0-499", [.closed(first: 0, last: 499)]),
        ("bytes=500-", [.from(500)]),
        ("bytes=-500", [.suffix(length: 500)]),
        ("bytes=0-1,5-9", [.closed(first: 0, last: 1), .closed(first: 5, last: 9)]),
        ("Bytes = 0-1 , , 5-9 ", [.closed(first: 0, last: 1), .closed(first: 5, last: 9)]),
        ("bytes=0-0,-1", [.closed(first: 0, last: 0), .suffix(length: 1)]),
        ("bytes=-0", [.suffix(length: 0)]),
        ("bytes=9223372036854775807-", [.from(Int64.max)]),
    ]

    @Test(arguments: valid)
    func parsesRangeValues(_ input: String, _ ranges: [ByteRangeSpec]) throws {
        let header = try RangeHeader(parsing: input)
        #expect(header.ranges == ranges)
        #expect(try RangeHeader(parsing: header.headerValue) == header)
    }

    @Test(arguments: [
        "", "bytes", "bytes=", "bytes= , ", "bytes=5-1", "bytes=-", "bytes=0-99999999999999999999",
        "bytes=99999999999999999999-", "items=0-1", "bytes 0-1", "bytes=0-1;2-3", "bytes=a-b", "bytes=--5",
        "bytes=1-2-3", "bytes=1", "bytes=0-1 2-3", "bytes=+1-2",
    ])
    func rejectsMalformedRangeValues(_ input: String) {
        #expect {
            try RangeHeader(parsing: input)
        } throws: { error in
            (error as? WireError)?.code == .malformedRangeHeader
        }
    }

    @Test func serialisesEveryKindOfRange() {
        let header = RangeHeader(ranges: [.closed(first: 0, last: 1), .from(5), .suffix(length: 3)])
        #expect(header.headerValue == "bytes=0-1,5-,-3")
    }

    @Test(arguments: [
        (ByteRangeSpec.closed(first: 0, last: 499), 1000, 0...499),
        (.closed(first: 500, last: 2000), 1000, 500...999),
        (.closed(first: 1000, last: 2000), 1000, nil),
        (.from(999), 1000, 999...999),
        (.from(1000), 1000, nil),
        (.suffix(length: 500), 100, 0...99),
        (.suffix(length: 10), 100, 90...99),
        (.suffix(length: 0), 100, nil),
        (.from(0), 0, nil),
    ] as [(ByteRangeSpec, Int64, ClosedRange<Int64>?)])
    func boundsFollowRFC9110Satisfiability(_ spec: ByteRangeSpec, _ length: Int64, _ expected: ClosedRange<Int64>?) {
        #expect(spec.bounds(forCompleteLength: length) == expected)
    }

    @Test func validityRejectsNegativeAndReversedRanges() {
        #expect(!ByteRangeSpec.closed(first: 5, last: 4).isValid)
        #expect(!ByteRangeSpec.from(-1).isValid)
        #expect(!ByteRangeSpec.suffix(length: -1).isValid)
        #expect(ByteRangeSpec.closed(first: 4, last: 4).isValid)
    }
}

import Testing

@testable import HTTPWire

@Suite struct RetryAfterTests {
    @Test(arguments: [
        ("120", RetryAfter.seconds(120)),
        (" 0 ", .seconds(0)),
        ("Fri, 31 Dec 1999 23:59:59 GMT", .date(HTTPDate(secondsSince1970: 946_684_799))),
        ("Sun Nov  6 08:49:37 1994", .date(HTTPDate(secondsSince1970: 784_111_777))),
    ])
    func parsesSecondsAndDates(_ input: String, _ expected: RetryAfter) throws {
        let value = try RetryAfter(parsing: input)
        #expect(value == expected)
        #expect(try RetryAfter(parsing: value.headerValue) == value)
    }

    @Test(arguments: ["", "-1", "1.5", "99999999999999999999", "soon", "120s", "12 0"])
    func rejectsOtherValues(_ input: String) {
        #expect {
            try RetryAfter(parsing: input)
        } throws: { error in
            (error as? WireError)?.code == .malformedRetryAfter
        }
    }

    @Test(arguments: [
        (RetryAfter.seconds(120), 1_000, 120),
        (.date(HTTPDate(secondsSince1970: 100)), 40, 60),
        (.date(HTTPDate(secondsSince1970: 100)), 200, 0),
        (.date(HTTPDate(secondsSince1970: Int64.max)), -10, Int64.max),
        (.date(HTTPDate(secondsSince1970: Int64.min)), 10, 0),
        (.seconds(-5), 0, 0),
    ] as [(RetryAfter, Int64, Int64)])
    func delayIsNeverNegative(_ value: RetryAfter, _ now: Int64, _ expected: Int64) {
        #expect(value.delay(fromSecondsSince1970: now) == expected)
    }
}

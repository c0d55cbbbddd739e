import Testing

@testable import HTTPWire

@Suite struct HTTPDateTests {
    /// 1994-11-06T08:49:37Z, the RFC 9110 §5.6.7 example.
    static let example: Int64 = 784_111_777

    @Test(arguments: [
        // The three formats of RFC 9110 §5.6.7.
        ("Sun, 06 Nov 1994 08:49:37 GMT", example),
        ("Sunday, 06-Nov-94 08:49:37 GMT", example),
        ("Sun Nov  6 08:49:37 1994", example),
        // Tolerated variations.
        ("sun, 06 nov 1994 08:49:37 gmt", example),
        ("Sun,  6 Nov 1994 08:49:37 UTC", example),
        ("  Sun, 06 Nov 1994 08:49:37 GMT ", example),
        ("Sun, 06-Nov-1994 08:49:37 GMT", example),
        ("Sun Nov 06 08:49:37 1994", example),
        // Edges of the calendar.
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0),
        ("Wed, 31 Dec 1969 23:59:59 GMT", -1),
        ("Tue, 29 Feb 2000 00:00:00 GMT", 951_782_400),
        ("Fri, 31 Dec 1999 23:59:59 GMT", 946_684_799),
        ("Fri, 31 Dec 1999 23:59:60 GMT", 946_684_800),
    ] as [(String, Int64)])
    func parsesAllThreeFormats(_ input: String, _ seconds: Int64) throws {
        #expect(try HTTPDate(parsing: input).secondsSince1970 == seconds)
    }

    @Test(arguments: [
        "", "yesterday", "Sun, 06 Nov 1994 08:49:37 PST", "Sun, 31 Feb 1994 08:49:37 GMT",
        "Mon, 29 Feb 1900 00:00:00 GMT", "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:60:00 GMT",
        "Sun, 06 Nov 1994 08:49:61 GMT", "Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 06 Nov 994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49 GMT", "Xyz, 06 Nov 1994 08:49:37 GMT", "Sun, 00 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMT\r\nX: y", "Sun Nov  6 08:49:37 94", "Sun, 06 Nov 1994 08:49:37",
        "Sun, 06 Nov 1994 08:49:37 GMT extra", "Sunday, 06-Nov 08:49:37 GMT", "Sun, 06 Nov 1994 8:49:37:00 GMT",
        "Sun, 06 Nov 1994 -8:49:37 GMT", "Sun, 6\u{E9} Nov 1994 08:49:37 GMT",
    ])
    func rejectsMalformedDates(_ input: String) {
        #expect {
            try HTTPDate(parsing: input)
        } throws: { error in
            (error as? WireError)?.code == .malformedHTTPDate
        }
    }

    /// RFC 9110 §5.6.7: a two-digit year more than 50 years in the future is in the previous century.
    @Test(arguments: [
        ("Thursday, 01-Jan-70 00:00:00 GMT", 3_155_760_000),  // 2070: 45 years after 2025, kept
        ("Thursday, 01-Jan-76 00:00:00 GMT", 189_302_400),  // 2076 would be 51 years ahead: 1976
        ("Sunday, 06-Nov-94 08:49:37 GMT", example),
    ] as [(String, Int64)])
    func twoDigitYearsPivotAroundNow(_ input: String, _ seconds: Int64) throws {
        let now: Int64 = 1_735_689_600  // 2025-01-01T00:00:00Z
        #expect(try HTTPDate(parsing: input, now: now).secondsSince1970 == seconds)
    }

    @Test func twoDigitYearsWithoutAClockUseThePOSIXPivot() throws {
        #expect(try HTTPDate(parsing: "Thursday, 01-Jan-70 00:00:00 GMT").secondsSince1970 == 0)
        #expect(try HTTPDate(parsing: "Saturday, 01-Jan-00 00:00:00 GMT").secondsSince1970 == 946_684_800)
    }

    @Test(arguments: [
        (example, "Sun, 06 Nov 1994 08:49:37 GMT"),
        (0, "Thu, 01 Jan 1970 00:00:00 GMT"),
        (-1, "Wed, 31 Dec 1969 23:59:59 GMT"),
        (951_782_400, "Tue, 29 Feb 2000 00:00:00 GMT"),
        (253_402_300_799, "Fri, 31 Dec 9999 23:59:59 GMT"),
        (-62_167_219_200, "Sat, 01 Jan 0000 00:00:00 GMT"),
    ] as [(Int64, String)])
    func formatsIMFFixdate(_ seconds: Int64, _ expected: String) {
        #expect(HTTPDate(secondsSince1970: seconds).headerValue == expected)
    }

    @Test func formattingRoundTripsAcrossCenturies() throws {
        for seconds in stride(from: Int64(-62_167_219_200), to: 253_402_300_799, by: 7_777_777_777) {
            let date = HTTPDate(secondsSince1970: seconds)
            #expect(try HTTPDate(parsing: date.headerValue) == date)
        }
    }

    @Test func civilConversionIsItsOwnInverse() {
        for days in stride(from: Int64(-1_000_000), through: 1_000_000, by: 997) {
            let date = HTTPDate.civil(fromDays: days)
            #expect(HTTPDate.days(fromCivilYear: date.year, month: date.month, day: date.day) == days)
        }
    }

    @Test func formattingExtremeSecondsDoesNotTrap() {
        #expect(HTTPDate(secondsSince1970: Int64.min).headerValue.hasSuffix(" GMT"))
        #expect(HTTPDate(secondsSince1970: Int64.max).headerValue.hasSuffix(" 15:30:07 GMT"))
    }

    @Test func datesAreOrdered() throws {
        #expect(HTTPDate(secondsSince1970: 1) < HTTPDate(secondsSince1970: 2))
    }
}

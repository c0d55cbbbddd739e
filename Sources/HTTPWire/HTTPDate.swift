extension WireError.Code {
    /// A date is not in one of the three HTTP-date formats, or names an impossible day or time.
    public static let malformedHTTPDate = WireError.Code("malformedHTTPDate")
}

/// An HTTP-date (RFC 9110 §5.6.7): a whole second in UTC.
public struct HTTPDate: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Seconds since 1970-01-01T00:00:00Z (negative before it), leap seconds not counted.
    public var secondsSince1970: Int64

    /// Creates a date.
    public init(secondsSince1970: Int64) { self.secondsSince1970 = secondsSince1970 }

    /// Parses an HTTP-date in any of its three formats (RFC 9110 §5.6.7):
    /// IMF-fixdate `Sun, 06 Nov 1994 08:49:37 GMT`, RFC 850 `Sunday, 06-Nov-94 08:49:37 GMT` and
    /// asctime `Sun Nov  6 08:49:37 1994`.
    ///
    /// Tolerant of case, of repeated spaces, of `UTC` for `GMT`, of a four-digit year in the RFC 850
    /// form and of a second 60; the weekday must be a day name but is not checked against the date.
    /// A two-digit year that would be more than 50 years after `now` is taken to be in the previous
    /// century, as RFC 9110 §5.6.7 requires. HTTPWire has no clock: without `now`, two-digit years
    /// 70...99 mean 19xx and 00...69 mean 20xx (the POSIX `strptime` pivot).
    /// - Parameters:
    ///   - value: The field value.
    ///   - now: The current time in seconds since 1970, used only for two-digit years.
    /// - Throws: ``WireError`` with code ``WireError/Code/malformedHTTPDate``.
    public init(parsing value: String, now: Int64? = nil) throws(WireError) {
        let code = WireError.Code.malformedHTTPDate
        let bytes = Array(value.utf8)
        if let index = bytes.firstIndex(where: { $0 < 0x20 || $0 == 0x7F || $0 >= 0x80 }) {
            throw WireError(code, offset: index, "unexpected byte \(bytes[index]) in date")
        }
        let text = value.trimmingHTTPWhitespace()
        let day: Int64, month: Int64, year: Int64, clock: Substring, zone: Substring?
        var yearDigits: Int
        if let comma = text.firstIndex(of: ",") {
            guard Self.isDayName(text[..<comma], allowLong: true) else {
                throw WireError(code, offset: 0, "unknown day name")
            }
            let fields = text[text.index(after: comma)...].split(separator: " ")
            if let first = fields.first, first.contains("-") {
                // rfc850-date = day-name-l "," SP date2 SP time-of-day SP GMT; date2 = 2DIGIT "-" month "-" 2DIGIT
                let date = first.split(separator: "-", omittingEmptySubsequences: false)
                guard fields.count == 3, date.count == 3 else { throw WireError(code, offset: 0, "bad RFC 850 date") }
                day = try Self.number(date[0], digits: 1...2)
                month = try Self.month(date[1])
                year = try Self.number(date[2], digits: 2...4)
                yearDigits = date[2].count
                clock = fields[1]
                zone = fields[2]
            } else {
                // IMF-fixdate = day-name "," SP date1 SP time-of-day SP GMT; date1 = 2DIGIT SP month SP 4DIGIT
                guard fields.count == 5 else { throw WireError(code, offset: 0, "bad IMF-fixdate") }
                day = try Self.number(fields[0], digits: 1...2)
                month = try Self.month(fields[1])
                year = try Self.number(fields[2], digits: 2...4)
                yearDigits = fields[2].count
                clock = fields[3]
                zone = fields[4]
            }
        } else {
            // asctime-date = day-name SP date3 SP time-of-day SP year; date3 = month SP ( 2DIGIT / ( SP DIGIT ) )
            let fields = text.split(separator: " ")
            guard fields.count == 5, Self.isDayName(fields[0], allowLong: false) else {
                throw WireError(code, offset: 0, "not an HTTP-date")
            }
            month = try Self.month(fields[1])
            day = try Self.number(fields[2], digits: 1...2)
            clock = fields[3]
            year = try Self.number(fields[4], digits: 4...4)
            yearDigits = 4
            zone = nil
        }
        if let zone, !["gmt", "utc", "ut"].contains(zone.lowercased()) {
            throw WireError(code, offset: 0, "time zone '\(zone)' is not GMT")
        }
        guard yearDigits != 3 else { throw WireError(code, offset: 0, "three-digit year") }
        var fullYear = year
        if yearDigits == 2 {
            if let now {
                let currentYear = Self.civil(fromDays: Self.floorDivide(now, 86_400)).year
                fullYear = currentYear - currentYear % 100 + year
                if fullYear > currentYear + 50 { fullYear -= 100 }
            } else {
                fullYear = year < 70 ? 2000 + year : 1900 + year
            }
        }
        let time = clock.split(separator: ":", omittingEmptySubsequences: false)
        guard time.count == 3 else { throw WireError(code, offset: 0, "time of day is not HH:MM:SS") }
        let hour = try Self.number(time[0], digits: 1...2)
        let minute = try Self.number(time[1], digits: 1...2)
        let second = try Self.number(time[2], digits: 1...2)
        // time-of-day ranges (RFC 9110 §5.6.7); second 60 allows a leap second.
        guard hour <= 23, minute <= 59, second <= 60 else { throw WireError(code, offset: 0, "time out of range") }
        guard day >= 1, day <= Self.daysInMonth(month, year: fullYear) else {
            throw WireError(code, offset: 0, "day \(day) does not exist in month \(month) of \(fullYear)")
        }
        let days = Self.days(fromCivilYear: fullYear, month: month, day: day)
        secondsSince1970 = days * 86_400 + hour * 3_600 + minute * 60 + second
    }

    /// The IMF-fixdate form, `Sun, 06 Nov 1994 08:49:37 GMT`, the only one senders may generate.
    /// Years outside 0...9999 print with as many digits as they need and cannot be parsed back.
    public var headerValue: String {
        let days = Self.floorDivide(secondsSince1970, 86_400)
        // Not `secondsSince1970 - days * 86_400`: that product overflows near Int64.min.
        let remainder = secondsSince1970 % 86_400
        let secondOfDay = remainder < 0 ? remainder + 86_400 : remainder
        let date = Self.civil(fromDays: days)
        let weekday = Int((days % 7 + 7 + 4) % 7)  // 1970-01-01 was a Thursday
        func pad(_ value: Int64, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(Self.shortDayNames[weekday]), \(pad(date.day, 2)) \(Self.monthNames[Int(date.month) - 1]) "
            + "\(pad(date.year, 4)) \(pad(secondOfDay / 3_600, 2)):\(pad(secondOfDay / 60 % 60, 2)):"
            + "\(pad(secondOfDay % 60, 2)) GMT"
    }

    public var description: String { headerValue }

    public static func < (lhs: HTTPDate, rhs: HTTPDate) -> Bool { lhs.secondsSince1970 < rhs.secondsSince1970 }

    // MARK: - Calendar arithmetic (proleptic Gregorian, after Howard Hinnant's "chrono-Compatible
    // Low-Level Date Algorithms")

    /// Days since 1970-01-01 of a civil date.
    static func days(fromCivilYear year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = floorDivide(y, 400)
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The civil date of a day count since 1970-01-01.
    static func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days + 719_468
        let era = floorDivide(z, 146_097)
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    static func floorDivide(_ value: Int64, _ divisor: Int64) -> Int64 {
        let quotient = value / divisor
        return (value % divisor != 0 && value < 0) ? quotient - 1 : quotient
    }

    private static func daysInMonth(_ month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    // MARK: - Field parsing

    private static let shortDayNames = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let longDayNames = ["sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"]
    private static let monthNames = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    private static func isDayName(_ text: Substring, allowLong: Bool) -> Bool {
        let name = text.trimmingHTTPWhitespace().lowercased()
        return shortDayNames.contains { $0.lowercased() == name } || (allowLong && longDayNames.contains(name))
    }

    private static func month(_ text: Substring) throws(WireError) -> Int64 {
        let name = text.lowercased()
        guard let index = monthNames.firstIndex(where: { $0.lowercased() == name }) else {
            throw WireError(.malformedHTTPDate, offset: 0, "unknown month '\(text)'")
        }
        return Int64(index + 1)
    }

    private static func number(_ text: Substring, digits: ClosedRange<Int>) throws(WireError) -> Int64 {
        guard digits.contains(text.utf8.count), text.utf8.allSatisfy(GrammarCharacters.isDigit) else {
            throw WireError(.malformedHTTPDate, offset: 0, "'\(text)' is not a \(digits)-digit number")
        }
        return text.utf8.reduce(0) { $0 * 10 + Int64($1 - 0x30) }
    }
}

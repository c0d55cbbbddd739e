import HTTPWire
import Testing

@testable import DownloadKitDecisions

/// The one way a range request's fields are written, as a table.
@Suite struct RangeRequestTests {
    struct Row: Sendable, CustomTestStringConvertible {
        var name: String
        var given: [(String, String)] = [("Accept", "*/*")]
        var range: ByteRangeSpec
        var ifRange: String?
        var range2: String
        var ifRange2: String?
        var testDescription: String { name }
    }

    static let rows: [Row] = [
        Row(name: "a resume from an offset carries the validator", range: .from(1000), ifRange: "\"v1\"",
            range2: "bytes=1000-", ifRange2: "\"v1\""),
        Row(name: "a segment asks for a closed range", range: .closed(first: 0, last: 4_194_303), ifRange: nil,
            range2: "bytes=0-4194303", ifRange2: nil),
        Row(name: "the caller's Range is replaced", given: [("Range", "bytes=5-")], range: .closed(first: 0, last: 0),
            ifRange: "Mon, 01 Jan 2024 00:00:00 GMT", range2: "bytes=0-0", ifRange2: "Mon, 01 Jan 2024 00:00:00 GMT"),
        Row(name: "without a validator no If-Range is left, even the caller's", given: [("If-Range", "\"old\"")],
            range: .from(7), ifRange: nil, range2: "bytes=7-", ifRange2: nil),
    ]

    @Test(arguments: rows)
    func fields(_ row: Row) {
        let headers = RangeRequest.headers(DKHTTPHeaders(row.given), asking: row.range, ifRange: row.ifRange)
        #expect(headers.listValues(name: "Range") == [row.range2])
        #expect(headers.first(name: "If-Range") == row.ifRange2)
        #expect(headers.filter { $0.name.lowercased() == "if-range" }.count <= 1)
        for (name, value) in row.given where name != "Range" && name != "If-Range" {
            #expect(headers.first(name: name) == value)
        }
    }
}

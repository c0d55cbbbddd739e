import HTTPWire
import Testing

@testable import DownloadKitDecisions

/// Every rule for an answer to a range request, as a table: the request's facts and a response head in,
/// a decision out — no socket, no file (issue #12). The single-connection engine, the probe and the
/// segment workers all decide through `RangeResponsePolicy`; their end-to-end tests stay beside these.
@Suite("RangeResponsePolicy")
struct RangeResponsePolicyTests {
    static let tag = try! EntityTag(parsing: "\"v1\"")
    static let weak = try! EntityTag(parsing: "W/\"v1\"")
    static let date = "Mon, 01 Jan 2024 00:00:00 GMT"

    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        var policy: RangeResponsePolicy
        var status: Int
        var headers: [(String, String)]
        var expected: RangeResponsePolicy.Decision
        var testDescription: String { name }
    }

    static func policy(
        first: Int64 = 1000, tag: EntityTag? = RangeResponsePolicyTests.tag, lastModified: String? = date, total: Int64? = 5000
    ) -> RangeResponsePolicy {
        RangeResponsePolicy(first: first, knownEntityTag: tag, knownLastModified: lastModified, knownTotal: total)
    }

    static let cases: [Case] = [
        // 206
        Case(name: "206 at the asked start with the same strong tag is written",
             policy: policy(), status: 206, headers: [("Content-Range", "bytes 1000-4999/5000"), ("Content-Length", "4000"), ("ETag", "\"v1\"")],
             expected: .write(first: 1000, last: 4999, total: 5000)),
        Case(name: "206 at another start is retried, the partial kept",
             policy: policy(), status: 206, headers: [("Content-Range", "bytes 0-4999/5000")],
             expected: .retry(detail: "range mismatch: asked for bytes from 1000, the server sent bytes 0-4999/5000")),
        Case(name: "206 without Content-Range is retried",
             policy: policy(), status: 206, headers: [],
             expected: .retry(detail: "a 206 without a valid Content-Range")),
        Case(name: "206 whose body length differs from its range is retried (an empty 206)",
             policy: policy(), status: 206, headers: [("Content-Range", "bytes 1000-4999/5000"), ("Content-Length", "0")],
             expected: .retry(detail: "the 206 body is 0 bytes but its Content-Range bytes 1000-4999/5000 names 4000")),
        Case(name: "206 with another strong tag means another version: restart",
             policy: policy(), status: 206, headers: [("Content-Range", "bytes 1000-4999/5000"), ("ETag", "\"v2\"")],
             expected: .restart(.validatorChanged)),
        Case(name: "206 with another total means another length: restart",
             policy: policy(), status: 206, headers: [("Content-Range", "bytes 1000-5999/6000")],
             expected: .restart(.lengthChanged)),
        Case(name: "206 with the same weak tag is written (If-Range was Last-Modified)",
             policy: policy(tag: weak), status: 206, headers: [("Content-Range", "bytes 1000-4999/5000"), ("ETag", "W/\"v1\"")],
             expected: .write(first: 1000, last: 4999, total: 5000)),
        Case(name: "206 with another weak tag: restart",
             policy: policy(tag: weak), status: 206, headers: [("Content-Range", "bytes 1000-4999/5000"), ("ETag", "W/\"v2\"")],
             expected: .restart(.validatorChanged)),
        Case(name: "206 with an unknown total is written",
             policy: policy(total: nil), status: 206, headers: [("Content-Range", "bytes 1000-1999/*")],
             expected: .write(first: 1000, last: 1999, total: nil)),
        // 200
        Case(name: "200 with another tag: the resource changed",
             policy: policy(), status: 200, headers: [("ETag", "\"v2\"")], expected: .wholeBody(.validatorChanged)),
        Case(name: "200 with the same tag: the server ignored the range",
             policy: policy(), status: 200, headers: [("ETag", "\"v1\"")], expected: .wholeBody(.rangeIgnored)),
        Case(name: "200 without the tag we knew: changed",
             policy: policy(), status: 200, headers: [], expected: .wholeBody(.validatorChanged)),
        Case(name: "200 with another Last-Modified and no tag known: changed",
             policy: policy(tag: nil), status: 200, headers: [("Last-Modified", "Tue, 02 Jan 2024 00:00:00 GMT")],
             expected: .wholeBody(.validatorChanged)),
        Case(name: "200 with no validator known: range ignored",
             policy: policy(tag: nil, lastModified: nil), status: 200, headers: [], expected: .wholeBody(.rangeIgnored)),
        // 416
        Case(name: "416 whose length equals the partial: complete",
             policy: policy(first: 5000), status: 416, headers: [("Content-Range", "bytes */5000")],
             expected: .complete(total: 5000)),
        Case(name: "416 whose length is larger than the partial contradicts itself: retried, partial kept",
             policy: policy(), status: 416, headers: [("Content-Range", "bytes */5000")],
             expected: .retry(detail: "416 for bytes from 1000 although the server gives the length as 5000")),
        Case(name: "416 whose length is smaller: the partial is longer than the resource",
             policy: policy(first: 6000, total: nil), status: 416, headers: [("Content-Range", "bytes */5000")],
             expected: .restart(.partialLongerThanResource)),
        Case(name: "416 equal to the partial but not to the recorded length: the length changed",
             policy: policy(first: 4000), status: 416, headers: [("Content-Range", "bytes */4000")],
             expected: .restart(.lengthChanged)),
        Case(name: "416 equal to the partial with another tag: the resource changed",
             policy: policy(first: 5000), status: 416, headers: [("Content-Range", "bytes */5000"), ("ETag", "\"v2\"")],
             expected: .restart(.validatorChanged)),
        Case(name: "416 without a length past byte 0: the partial is longer than the resource",
             policy: policy(), status: 416, headers: [], expected: .restart(.partialLongerThanResource)),
        // Not answers to a range
        Case(name: "a redirect is the caller's", policy: policy(), status: 302, headers: [("Location", "/x")], expected: .other),
        Case(name: "a 503 is the caller's", policy: policy(), status: 503, headers: [], expected: .other),
    ]

    @Test(arguments: cases)
    func decision(_ testCase: Case) {
        let head = ResponseHead(
            version: DKHTTPVersion(major: 1, minor: 1), status: testCase.status, reason: "",
            headers: DKHTTPHeaders(testCase.headers))
        #expect(testCase.policy.decide(head) == testCase.expected)
    }
}

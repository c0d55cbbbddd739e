import Testing

@testable import HTTPWire

/// A request that must be refused at encode time, and the code it must be refused with.
struct RejectedRequest: Sendable, CustomTestStringConvertible {
    var name: String
    var target = "/file.bin"
    var host = "example.com"
    var headers: [(String, String)] = []
    var code: WireError.Code

    var testDescription: String { name }
}

let rejectedRequests: [RejectedRequest] = [
    RejectedRequest(
        name: "CRLF in a header value", headers: [("X-A", "1\r\nX-Injected: 1")], code: .invalidHeaderValue),
    RejectedRequest(
        name: "bare LF in a header value", headers: [("X-A", "1\nGET / HTTP/1.1")], code: .invalidHeaderValue),
    RejectedRequest(name: "bare CR in a header value", headers: [("X-A", "1\r")], code: .invalidHeaderValue),
    RejectedRequest(name: "NUL in a header value", headers: [("X-A", "a\u{0}b")], code: .invalidHeaderValue),
    RejectedRequest(name: "other control in a header value", headers: [("X-A", "a\u{1B}b")], code: .invalidHeaderValue),
    RejectedRequest(name: "DEL in a header value", headers: [("X-A", "a\u{7F}")], code: .invalidHeaderValue),
    RejectedRequest(name: "space in a header name", headers: [("X A", "1")], code: .invalidHeaderName),
    RejectedRequest(name: "colon in a header name", headers: [("X-A:", "1")], code: .invalidHeaderName),
    RejectedRequest(name: "CRLF in a header name", headers: [("X\r\nY", "1")], code: .invalidHeaderName),
    RejectedRequest(name: "empty header name", headers: [("", "1")], code: .invalidHeaderName),
    RejectedRequest(name: "non-ASCII header name", headers: [("Ünïcode", "1")], code: .invalidHeaderName),
    RejectedRequest(name: "space in the target", target: "/a b", code: .invalidRequestTarget),
    RejectedRequest(name: "CRLF in the target", target: "/a\r\nX: 1", code: .invalidRequestTarget),
    RejectedRequest(name: "tab in the target", target: "/a\tb", code: .invalidRequestTarget),
    RejectedRequest(name: "non-ASCII in the target", target: "/ß", code: .invalidRequestTarget),
    RejectedRequest(name: "fragment in the target", target: "/a#frag", code: .invalidRequestTarget),
    RejectedRequest(name: "absolute-form target of another scheme", target: "ftp://example.com/", code: .invalidRequestTarget),
    RejectedRequest(name: "empty target", target: "", code: .invalidRequestTarget),
    RejectedRequest(name: "empty host", host: "", code: .invalidHost),
    RejectedRequest(name: "CRLF in the host", host: "a\r\nX: 1", code: .invalidHost),
    RejectedRequest(name: "space in the host", host: "a b", code: .invalidHost),
    RejectedRequest(name: "NUL in the host", host: "a\u{0}", code: .invalidHost),
    RejectedRequest(name: "slash in the host", host: "evil.com/x", code: .invalidHost),
    RejectedRequest(name: "userinfo in the host", host: "user@evil.com", code: .invalidHost),
    RejectedRequest(
        name: "content-length on a request without body", headers: [("Content-Length", "5")],
        code: .forbiddenRequestHeader),
    RejectedRequest(
        name: "transfer-encoding on a request without body", headers: [("transfer-encoding", "chunked")],
        code: .forbiddenRequestHeader),
]

@Suite struct RequestHeadTests {
    @Test func encodesRequestLineHostFirstThenFieldsInOrder() throws {
        let head = RequestHead(
            method: .GET, target: "/files/big.iso?sig=abc%20d&x=1", host: "[::1]:8080",
            headers: ["Range": "bytes=500-999", "If-Range": "\"etag\"", "User-Agent": "DownloadKit"])
        let expected =
            "GET /files/big.iso?sig=abc%20d&x=1 HTTP/1.1\r\nHost: [::1]:8080\r\n"
            + "Range: bytes=500-999\r\nIf-Range: \"etag\"\r\nUser-Agent: DownloadKit\r\n\r\n"
        #expect(String(decoding: try head.encoded(), as: UTF8.self) == expected)
    }

    @Test func encodesHEADWithoutFields() throws {
        let head = RequestHead(method: .HEAD, target: "/", host: "example.com")
        #expect(String(decoding: try head.encoded(), as: UTF8.self) == "HEAD / HTTP/1.1\r\nHost: example.com\r\n\r\n")
    }

    @Test func callerHostFieldsAreDroppedSoHostIsFirstAndSingle() throws {
        let head = RequestHead(
            method: .GET, target: "/x", host: "right.example",
            headers: DKHTTPHeaders([("host", "wrong.example"), ("Accept", "*/*"), ("HOST", "evil.example\r\nX: 1")]))
        let text = String(decoding: try head.encoded(), as: UTF8.self)
        #expect(text == "GET /x HTTP/1.1\r\nHost: right.example\r\nAccept: */*\r\n\r\n")
    }

    @Test func encodeAppendsToExistingBytes() throws {
        var buffer = Array("prefix".utf8)
        try RequestHead(method: .GET, target: "/", host: "h").encode(into: &buffer)
        #expect(String(decoding: buffer, as: UTF8.self) == "prefixGET / HTTP/1.1\r\nHost: h\r\n\r\n")
    }

    @Test func tabAndNonASCIIAreAllowedInFieldValues() throws {
        let head = RequestHead(method: .GET, target: "/", host: "h", headers: ["X-Note": "a\tb café"])
        #expect(String(decoding: try head.encoded(), as: UTF8.self).contains("X-Note: a\tb café\r\n"))
    }

    @Test(arguments: rejectedRequests)
    func injectionAttemptIsRejectedAndLeavesTheBufferUnchanged(_ request: RejectedRequest) {
        let head = RequestHead(
            method: .GET, target: request.target, host: request.host, headers: DKHTTPHeaders(request.headers))
        var buffer = Array("keep".utf8)
        do throws(WireError) {
            try head.encode(into: &buffer)
            Issue.record("encoded \(String(decoding: buffer, as: UTF8.self).debugDescription)")
        } catch {
            #expect(error.code == request.code, "\(error)")
        }
        #expect(buffer == Array("keep".utf8))
    }

    @Test func encodedRequestRoundTripsThroughAStrictReader() throws {
        // Every line of an encoded head is CRLF-terminated and contains no other CR or LF.
        let head = RequestHead(
            method: .GET, target: "/a?b=c", host: "example.com:443", headers: ["A": "1", "B": "two words"])
        let bytes = try head.encoded()
        var lines: [String] = []
        var current: [UInt8] = []
        var index = 0
        while index < bytes.count {
            if bytes[index] == 0x0D {
                #expect(index + 1 < bytes.count && bytes[index + 1] == 0x0A)
                lines.append(String(decoding: current, as: UTF8.self))
                current = []
                index += 2
            } else {
                #expect(bytes[index] != 0x0A)
                current.append(bytes[index])
                index += 1
            }
        }
        #expect(current.isEmpty)
        #expect(lines == ["GET /a?b=c HTTP/1.1", "Host: example.com:443", "A: 1", "B: two words", ""])
    }
}

import Testing

@testable import HTTPWire

/// One llhttp-style response case of the strict-framing decisions (issue #47 items 4 and 5; the table
/// beside ``ResponseParser``): input bytes and what the parser must make of them.
struct StrictFramingCase: Sendable, CustomTestStringConvertible {
    enum Expectation: Sendable {
        /// A complete response: its final status, payload, whether the connection may be reused, and how
        /// many input bytes it took (the rest belongs to no response of ours).
        case accepted(status: Int, body: String, reusable: Bool, consumed: Int? = nil)
        /// The typed error.
        case rejected(WireError.Code)
    }

    var name: String
    var input: [UInt8]
    var expectation: Expectation

    init(_ name: String, _ input: String, _ expectation: Expectation) {
        self.name = name
        self.input = Array(input.utf8)
        self.expectation = expectation
    }

    init(_ name: String, bytes: [UInt8], _ expectation: Expectation) {
        self.name = name
        self.input = bytes
        self.expectation = expectation
    }

    var testDescription: String { name }
}

private let ok = "HTTP/1.1 200 OK\r\n"
private let chunked = ok + "Transfer-Encoding: chunked\r\n\r\n"

@Suite struct StrictFramingTests {
    static let cases: [StrictFramingCase] = [
        // Item 4: empty lines before a status line are skipped, a few at most.
        .init(
            "empty line after 100 Continue (aiohttp)",
            "HTTP/1.1 100 Continue\r\n\r\n\r\n" + ok + "Content-Length: 2\r\n\r\nok",
            .accepted(status: 200, body: "ok", reusable: true)),
        .init("CRLF before the status line", "\r\n" + ok + "Content-Length: 2\r\n\r\nok", .accepted(status: 200, body: "ok", reusable: true)),
        .init("LF before the status line", "\n\r\n" + ok + "Content-Length: 0\r\n\r\n", .accepted(status: 200, body: "", reusable: true)),
        .init(
            "four empty lines before the status line", String(repeating: "\r\n", count: 4) + ok + "Content-Length: 0\r\n\r\n",
            .accepted(status: 200, body: "", reusable: true)),
        .init(
            "five empty lines before the status line", String(repeating: "\r\n", count: 5) + ok + "Content-Length: 0\r\n\r\n",
            .rejected(.malformedStatusLine)),
        .init("whitespace-only line before the status line", " \r\n" + ok + "\r\n", .rejected(.malformedStatusLine)),
        // Control bytes in field values.
        .init("SOH in a field value", ok + "X-A: a\u{01}b\r\nContent-Length: 0\r\n\r\n", .rejected(.invalidCharacterInHead)),
        .init("ESC in a field value", ok + "X-A: \u{1B}[31m\r\nContent-Length: 0\r\n\r\n", .rejected(.invalidCharacterInHead)),
        .init("DEL in a field value", ok + "X-A: a\u{7F}\r\nContent-Length: 0\r\n\r\n", .rejected(.invalidCharacterInHead)),
        .init("VT in a Content-Length value", ok + "Content-Length: \u{0B}2\r\n\r\nok", .rejected(.invalidCharacterInHead)),
        .init("NUL in a field value", ok + "X-A: a\u{00}b\r\n\r\n", .rejected(.invalidCharacterInHead)),
        .init("bare CR in a field value", ok + "X-A: a\rb\r\n\r\n", .rejected(.invalidCharacterInHead)),
        .init(
            "HTAB inside a field value", ok + "X-A: a\tb\r\nContent-Length: 0\r\n\r\n",
            .accepted(status: 200, body: "", reusable: true)),
        .init(
            "obs-text in a field value",
            bytes: Array((ok + "X-A: caf").utf8) + [0xC3, 0xA9] + Array("\r\nContent-Length: 0\r\n\r\n".utf8),
            .accepted(status: 200, body: "", reusable: true)),
        // Content-Length with chunked: chunked wins, the connection is never reused.
        .init(
            "Content-Length and chunked", ok + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
            .accepted(status: 200, body: "ok", reusable: false)),
        .init(
            "chunked and then Content-Length", ok + "Transfer-Encoding: chunked\r\nContent-Length: 100\r\n\r\n2\r\nok\r\n0\r\n\r\n",
            .accepted(status: 200, body: "ok", reusable: false)),
        // Bare LF: accepted in the head, never in chunked framing.
        .init("bare LF line ends in the head", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok", .accepted(status: 200, body: "ok", reusable: true)),
        .init("bare LF after a chunk size", chunked + "2\nok\r\n0\r\n\r\n", .rejected(.invalidChunkTerminator)),
        .init("bare LF after chunk data", chunked + "2\r\nok\n0\r\n\r\n", .rejected(.invalidChunkTerminator)),
        .init("bare LF ending the last chunk", chunked + "2\r\nok\r\n0\n\r\n", .rejected(.invalidChunkTerminator)),
        .init("bare LF ending the chunked body", chunked + "2\r\nok\r\n0\r\n\n", .rejected(.invalidChunkTerminator)),
        // Data after `Connection: close`: the response stands, the rest is never parsed, no reuse.
        .init(
            "data after Connection: close",
            ok + "Connection: close\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            .accepted(status: 200, body: "ok", reusable: false, consumed: (ok + "Connection: close\r\nContent-Length: 2\r\n\r\nok").utf8.count)),
        // Chunk sizes and extensions, strictly by RFC 9112 §7.1.1.
        .init("chunk size with trailing space", chunked + "2 \r\nok\r\n0\r\n\r\n", .rejected(.invalidChunkSize)),
        .init("chunk size with trailing tab", chunked + "2\t\r\nok\r\n0\r\n\r\n", .rejected(.invalidChunkSize)),
        .init("last chunk with trailing space", chunked + "2\r\nok\r\n0 \r\n\r\n", .rejected(.invalidChunkSize)),
        .init("whitespace before an extension", chunked + "2 ;a=b\r\nok\r\n0\r\n\r\n", .accepted(status: 200, body: "ok", reusable: true)),
        .init("empty chunk extension", chunked + "2;\r\nok\r\n0\r\n\r\n", .rejected(.invalidChunkExtension)),
        .init("two semicolons", chunked + "2;;a\r\nok\r\n0\r\n\r\n", .rejected(.invalidChunkExtension)),
        .init("extension with = and no value", chunked + "2;a=\r\nok\r\n0\r\n\r\n", .rejected(.invalidChunkExtension)),
        .init("unbalanced quoted extension", chunked + "2;a=\"b\r\nok\r\n0\r\n\r\n", .rejected(.invalidChunkExtension)),
        .init("quoted extension with CRLF inside", chunked + "2;a=\"b\r\n\"\r\nok\r\n0\r\n\r\n", .rejected(.invalidChunkExtension)),
        .init("extension name that is not a token", chunked + "2;a@b\r\nok\r\n0\r\n\r\n", .rejected(.invalidChunkExtension)),
        .init(
            "token and flag extensions", chunked + "2;name=value;flag ; x = y\r\nok\r\n0;last\r\n\r\n",
            .accepted(status: 200, body: "ok", reusable: true)),
        .init(
            "quoted extension with an escaped quote", chunked + "2;a=\"b \\\"c\\\" d\"\r\nok\r\n0\r\n\r\n",
            .accepted(status: 200, body: "ok", reusable: true)),
        .init("quoted extension with a semicolon inside", chunked + "2;a=\"x;y\"\r\nok\r\n0\r\n\r\n", .accepted(status: 200, body: "ok", reusable: true)),
    ]

    /// Every case, fed at once, byte by byte and split at every offset, gives the same decision.
    @Test(arguments: cases)
    func strictFramingDecision(_ testCase: StrictFramingCase) {
        for feeding in Feeding.all(count: testCase.input.count) {
            let outcome = runParser(testCase.input, feeding: feeding, eof: false)
            switch testCase.expectation {
            case .accepted(let status, let body, let reusable, let consumed):
                #expect(outcome.error == nil, "\(feeding): \(outcome)")
                #expect(outcome.heads.map(\.status) == [status], "\(feeding): \(outcome)")
                #expect(outcome.ended, "\(feeding): \(outcome)")
                #expect(String(decoding: outcome.body, as: UTF8.self) == body, "\(feeding): \(outcome)")
                #expect(outcome.reusable == reusable, "\(feeding): \(outcome)")
                #expect(outcome.consumed == consumed ?? testCase.input.count, "\(feeding): \(outcome)")
            case .rejected(let code):
                #expect(outcome.error?.code == code, "\(feeding): \(outcome)")
            }
        }
    }
}

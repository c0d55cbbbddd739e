import DownloadKit
import Foundation
import Testing
import TestOrigin

/// The strict-framing decisions end to end (issue #47 items 4, 5; the table beside `ResponseParser`):
/// what the parser accepts, a download completes with; what it refuses, a download reports as the
/// server's invalid response, with nothing written as if it were the body.
@Suite(.serialized, .timeLimit(.minutes(1)))
struct StrictFramingDownloadTests {
    enum Outcome: Sendable {
        case body(String)
        case invalidResponse(String)
    }

    static let cases: [(name: String, response: String, outcome: Outcome)] = [
        (
            "empty line after 100 Continue",
            "HTTP/1.1 100 Continue\r\n\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", .body("ok")
        ),
        (
            "Content-Length with chunked: chunked wins, the length is not the total",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", .body("ok")
        ),
        (
            "control byte in a field value",
            "HTTP/1.1 200 OK\r\nX-A: a\u{01}b\r\nContent-Length: 2\r\n\r\nok", .invalidResponse("control byte 0x01")
        ),
        (
            "unbalanced quoted chunk extension",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;a=\"b\r\nok\r\n0\r\n\r\n",
            .invalidResponse("unterminated or invalid quoted chunk-extension value")
        ),
    ]

    @Test(arguments: cases.indices)
    func downloadFollowsTheDecision(index: Int) async throws {
        let testCase = Self.cases[index]
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let response = testCase.response
        origin.serve("/f", .script { _, connection in try connection.write(response) })
        let dir = try ScratchDirectory()
        let configuration = DownloadConfiguration(retries: 0)
        let download = Download(
            DownloadRequest(url: origin.url("/f"), destination: .file(dir.file("f"))), configuration: configuration)
        download.start()
        switch testCase.outcome {
        case .body(let body):
            let result = try await download.result()
            #expect(result.bytes == Int64(body.utf8.count), "\(testCase.name)")
            #expect(FileManager.default.contents(atPath: dir.file("f")) == Data(body.utf8), "\(testCase.name)")
        case .invalidResponse(let cause):
            do {
                _ = try await download.result()
                Issue.record("\(testCase.name): accepted")
            } catch {
                #expect(error.code == .protocolViolation, "\(testCase.name): \(error)")
                #expect(error.detail.contains(cause), "\(testCase.name): \(error)")
            }
            #expect(!FileManager.default.fileExists(atPath: dir.file("f")), "\(testCase.name)")
        }
    }
}

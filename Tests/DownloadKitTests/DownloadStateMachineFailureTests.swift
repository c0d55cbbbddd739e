import HTTPWire
import Testing

@_spi(DownloadKitInternal) @testable import DownloadKit
@testable import DownloadKitDecisions

/// The failures the machine decides are values (``MachineFailure``); the library's error for each — code,
/// message, status, transient — comes from one mapping, and its messages are the ones callers and tests
/// have matched since the machine spelled them itself.
@Suite("DownloadStateMachine failures")
struct DownloadStateMachineFailureTests {
    struct Row: CustomTestStringConvertible, Sendable {
        var failure: MachineFailure
        var code: DownloadError.Code
        var detail: String
        var status: Int? = nil
        var transient = false
        var testDescription: String { "\(failure)" }
    }

    static let origin = try! HTTPURL("http://origin.test/disk.iso")
    static let plain = try! HTTPURL("http://cdn.test/disk.iso")

    static let rows: [Row] = [
        Row(
            failure: .bodyPastRange(lastByte: 4999), code: .contentRangeMismatch,
            detail: "the 206 body runs past the end of its Content-Range (byte 4999)", status: 206, transient: true),
        Row(
            failure: .tooSlow(bytesPerSecond: 400, seconds: 10, limit: 1000), code: .tooSlow,
            detail: "transfer too slow: 400 bytes/s for 10 s, below the limit of 1000 bytes/s", transient: true),
        Row(
            failure: .contentMD5Mismatch(stated: [0x90, 0x01, 0x50]), code: .contentMD5Mismatch,
            detail: "checksum mismatch: the body does not match the server's Content-MD5 kAFQ"),
        Row(
            failure: .truncated(expected: 5000, received: 4999), code: .truncated,
            detail: "truncated: expected 5000 bytes, received 4999", transient: true),
        Row(
            failure: .pieceMismatch(piece: 2, range: 2048..<3072, algorithm: "sha-256"), code: .pieceChecksumMismatch,
            detail: "piece 2 (bytes 2048-3071) failed its sha-256 check (one connection: it cannot be fetched again alone)"),
        Row(
            failure: .checksumMismatch(algorithm: "sha-256", computed: "aa", expected: "bb", statedByServer: false),
            code: .checksumMismatch, detail: "checksum mismatch: sha-256 of the download is aa, expected bb"),
        Row(
            failure: .checksumMismatch(algorithm: "sha-256", computed: "aa", expected: "bb", statedByServer: true),
            code: .checksumMismatch,
            detail: "checksum mismatch: sha-256 of the download is aa; the server's digest header states bb"),
        Row(
            failure: .status(503, reason: "", url: origin), code: .httpStatus,
            detail: "HTTP status 503 Service Unavailable from http://origin.test/disk.iso", status: 503, transient: true),
        Row(
            failure: .status(404, reason: "Gone Fishing", url: origin), code: .httpStatus,
            detail: "HTTP status 404 Gone Fishing from http://origin.test/disk.iso", status: 404),
        Row(
            failure: .redirectWithoutLocation(status: 302, from: origin), code: .invalidRedirect,
            detail: "redirect 302 without a Location header from http://origin.test/disk.iso"),
        Row(
            failure: .unusableRedirect(status: 301, location: "ftp://x", detail: "not http"), code: .insecureRedirect,
            detail: "refusing redirect to ftp://x: not http", status: 301),
        Row(
            failure: .redirectToHTTP(status: 301, target: plain), code: .insecureRedirect,
            detail: "refusing redirect from https to http (http://cdn.test/disk.iso); allow it explicitly", status: 301),
        Row(
            failure: .tooManyRedirects(limit: 1, from: origin), code: .tooManyRedirects,
            detail: "too many redirects: more than 1 starting at http://origin.test/disk.iso"),
        Row(
            failure: .redirectLoop(plain), code: .redirectLoop, detail: "redirect loop: http://cdn.test/disk.iso was already visited"),
        Row(
            failure: .rangeMismatch(status: 206, detail: "the range probe: no"), code: .contentRangeMismatch,
            detail: "the range probe: no", status: 206, transient: true),
        Row(
            failure: .tooManyBytes(received: 5001, total: 5000), code: .protocolViolation,
            detail: "the server sent 5001 bytes for a resource of 5000 bytes"),
        Row(
            failure: .noBodyBytes(offset: 1000, total: 5000), code: .contentRangeMismatch,
            detail: "the server answered with no body bytes at offset 1000 of 5000", transient: true),
        Row(
            failure: .invalidProvidedURL("nope"), code: .invalidURL, detail: "the URL provider returned an invalid URL nope"),
        Row(
            failure: .restartsExhausted(count: 4, last: .validatorChanged), code: .serverIgnoredRange,
            detail: "the resource changed (or its length, or the server ignored the range) 4 times in this run, the partial discarded each time (last: validatorChanged); giving up"),
        Row(failure: .internalError("a wait ended in state idle"), code: .internalError, detail: "a wait ended in state idle"),
    ]

    @Test(arguments: rows)
    func eachFailureHasItsCodeAndMessage(_ row: Row) {
        let error = DownloadError(decided: row.failure)
        #expect(error.code == row.code)
        #expect(error.detail == row.detail)
        #expect(error.httpStatus == row.status)
        #expect(error.isTransient == row.transient)
        #expect(!error.isCancellation)
    }

    /// The machine reads a cancellation through the protocol: never retried, even when transient.
    @Test func aCancellationIsNeverRetried() throws {
        var machine = try DownloadStateMachineTests.machine(DownloadConfiguration(retries: 5))
        _ = machine.start()
        let cancelled = DownloadError(.cancelled, "stopped", isTransient: true)
        #expect(cancelled.isCancellation)
        #expect(machine.failed(cancelled, stopRequested: false, jitter: 1).next == .fail(cancelled))
    }
}

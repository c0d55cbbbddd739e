import Foundation
import HTTPWire
import Testing
import TestOrigin
import TestThreads

@testable import HTTPClient

// MARK: - Helpers shared with ConnectionPoolTests

/// What one `DKHTTPClient.execute` produced: the summary, every head `onHead` saw, and the body bytes.
struct FetchedResponse {
    var summary: ExchangeSummary
    var heads: [ResponseHead]
    var body: [UInt8]
}

/// Runs one exchange and collects the heads and body it delivers.
func fetch(
    _ client: DKHTTPClient, _ url: String, method: DKHTTPMethod = .GET, headers: DKHTTPHeaders = DKHTTPHeaders(),
    disposition: BodyDisposition = .stream, cancellation: CancellationToken? = nil,
    onBodyBytes: (Int) -> Void = { _ in }
) throws -> FetchedResponse {
    var heads: [ResponseHead] = []
    var body: [UInt8] = []
    let summary = try client.execute(
        DKHTTPRequest(method: method, url: try HTTPURL(url), headers: headers), cancellation: cancellation,
        onHead: { head in
            heads.append(head)
            return disposition
        },
        onBody: { bytes in
            body.append(contentsOf: bytes)
            onBodyBytes(body.count)
        })
    return FetchedResponse(summary: summary, heads: heads, body: body)
}

/// A value shared between test threads, guarded by a lock.
final class LockedBox<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value

    init(_ value: Value) { stored = value }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&stored)
    }

    var value: Value { withLock { $0 } }
}

/// Runs `body(index)` on `count` new threads at once and waits for all of them.
func runOnThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let group = DispatchGroup()
    for index in 0..<count {
        group.enter()
        let thread = Thread {
            body(index)
            group.leave()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }
    group.wait()
}

/// Polls `condition` every 5 ms until it holds or `timeout` seconds pass; returns its last value.
func eventually(timeout: Double = 5, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while !condition() {
        if Date() >= deadline { return false }
        usleep(5_000)
    }
    return true
}

/// A client with short timeouts, suitable for loopback tests.
func makeTestClient(
    maxConnectionsPerOrigin: Int = 8, idleConnectionLifetime: Duration = .seconds(60), connectTimeout: Duration = .seconds(10),
    idleTimeout: Duration = .seconds(10), parserLimits: ParserLimits = .default
) throws -> DKHTTPClient {
    try DKHTTPClient(
        configuration: DKHTTPClientConfiguration(
            connectTimeout: connectTimeout, idleTimeout: idleTimeout, maxConnectionsPerOrigin: maxConnectionsPerOrigin,
            idleConnectionLifetime: idleConnectionLifetime, receiveBufferSize: 64 << 10, parserLimits: parserLimits))
}

/// A fixed response whose head lets the connection stay open, written in one `write` by a script.
private func scriptedOK(_ body: String, extra: String = "") -> String {
    "HTTP/1.1 200 OK\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)\(extra)"
}

// MARK: - Exchange

/// `DKHTTPClient.execute` against a fault-injecting origin: framing, reuse decisions, retries, timeouts
/// and cancellation (RFC 9112 §6 message body length, §9 connection management).
@Suite("HTTPClient exchange", .timeLimit(.minutes(1)))
struct ExchangeTests {
    struct BodyCase: Sendable, CustomTestStringConvertible {
        var chunked: Bool
        var size: Int64
        var testDescription: String { "\(chunked ? "chunked" : "Content-Length") \(size) bytes" }
    }

    @Test(arguments: [
        BodyCase(chunked: false, size: 3 << 20 + 123),
        BodyCase(chunked: true, size: 3 << 20 + 123),
        BodyCase(chunked: false, size: 0),
    ])
    func headAndStreamedBodyEqualTheResource(_ body: BodyCase) throws {
        let origin = try FaultOrigin()
        let resource = Resource(size: body.size, seed: 7, chunked: body.chunked)
        origin.serve("/file.bin", .resource(resource))
        let client = try makeTestClient()

        let response = try fetch(client, origin.url("/file.bin"))
        try #require(response.heads.count == 1)
        let head = response.heads[0]
        #expect(head.status == 200)
        #expect(head.headers.first(name: "ETag") == resource.etag)
        if body.chunked {
            #expect(head.headers.listValues(name: "Transfer-Encoding") == ["chunked"])
            #expect(try head.contentLength() == nil)
        } else {
            #expect(try head.contentLength() == body.size)
        }
        #expect(response.summary.bodyBytes == body.size)
        #expect(response.body.count == Int(body.size))
        #expect(TestPattern.matches(response.body, offset: 0, seed: 7), "the body differs from the resource")
        #expect(response.summary.connectionReused == false)
        #expect(response.summary.connectionKeptAlive)
    }

    struct DiscardCase: Sendable, CustomTestStringConvertible {
        var bodySize: Int
        var keepsConnection: Bool
        var testDescription: String { "\(bodySize)-byte error body, reusable: \(keepsConnection)" }
    }

    /// A small unwanted body is drained so the connection can be reused; a large one is not worth
    /// reading, so the connection is closed instead (BodyDisposition.discard, 64 KiB threshold).
    @Test(arguments: [
        DiscardCase(bodySize: 2_000, keepsConnection: true),
        DiscardCase(bodySize: 64 << 10, keepsConnection: true),
        DiscardCase(bodySize: 1 << 20, keepsConnection: false),
    ])
    func discardingAnErrorBody(_ discard: DiscardCase) throws {
        let origin = try FaultOrigin()
        origin.serve("/error", .response(status: 404, headers: [], body: [UInt8](repeating: 0x45, count: discard.bodySize)))
        origin.serve("/ok", .resource(Resource(body: Array("fine".utf8))))
        let client = try makeTestClient()

        let error = try fetch(client, origin.url("/error"), disposition: .discard)
        #expect(error.heads.map(\.status) == [404])
        #expect(error.body.isEmpty, "a discarded body must never reach onBody")
        #expect(error.summary.bodyBytes == 0)
        #expect(error.summary.connectionKeptAlive == discard.keepsConnection)

        let next = try fetch(client, origin.url("/ok"))
        #expect(next.body == Array("fine".utf8))
        #expect(next.summary.connectionReused == discard.keepsConnection)
        #expect(client.connectionsOpened == (discard.keepsConnection ? 1 : 2))
        #expect(origin.connectionCount == (discard.keepsConnection ? 1 : 2))
        if discard.keepsConnection {
            #expect(next.summary.connectionID == error.summary.connectionID)
        }
    }

    /// The server answers with keep-alive, then closes the idle connection. The pool notices the EOF
    /// before reuse and the second request goes out on a new connection.
    @Test func keptAliveConnectionClosedWhileIdleIsReplaced() throws {
        let origin = try FaultOrigin()
        origin.serve("/once", .script { _, connection in
            try connection.write(scriptedOK("first"))
            // keepsAlive stays false: the origin closes the socket after answering.
        })
        let client = try makeTestClient()

        let first = try fetch(client, origin.url("/once"))
        #expect(first.body == Array("first".utf8))
        #expect(first.summary.connectionKeptAlive, "the response did not say Connection: close")
        #expect(eventually { origin.openConnectionCount == 0 }, "the origin should have closed the connection")

        let second = try fetch(client, origin.url("/once"))
        #expect(second.body == Array("first".utf8))
        #expect(second.summary.connectionReused == false)
        #expect(client.connectionsOpened == 2)
        #expect(origin.requests("/once").map(\.connectionID) == [1, 2])
    }

    /// The server reads the second request on a kept-alive connection and closes without answering
    /// (the race RFC 9112 §9.3.1 warns about): the GET is retried once, transparently, on a new connection.
    @Test func requestOnAStaleKeptAliveConnectionIsRetriedOnceOnAFreshOne() throws {
        let origin = try FaultOrigin()
        origin.serve("/stale", .script { request, connection in
            if request.connectionID == 1 && request.indexOnConnection == 1 {
                connection.close()
                return
            }
            try connection.write(scriptedOK("body-\(request.connectionID)"))
            connection.keepsAlive = true
        })
        let client = try makeTestClient()

        let first = try fetch(client, origin.url("/stale"))
        #expect(first.body == Array("body-1".utf8))
        let second = try fetch(client, origin.url("/stale"))
        #expect(second.body == Array("body-2".utf8))
        #expect(second.summary.connectionReused == false)
        #expect(second.summary.connectionID != first.summary.connectionID)
        #expect(client.connectionsOpened == 2)
        let recorded = origin.requests("/stale")
        #expect(recorded.map(\.connectionID) == [1, 1, 2], "one request, the dropped one, and its single retry")
    }

    /// A fresh connection that closes before any response byte is an error, never retried.
    @Test func freshConnectionClosedBeforeAnyByteIsAnErrorWithoutRetry() throws {
        let origin = try FaultOrigin()
        origin.serve("/mute", .script { _, connection in connection.close() })
        let client = try makeTestClient()

        #expect {
            try fetch(client, origin.url("/mute"))
        } throws: { error in
            if let wire = error as? WireError {
                return wire.code == .missingResponseHead || wire.code == .truncatedHead
            }
            if let transport = error as? TransportError {
                return transport.code == .connectionClosed || transport.code == .connectionReset
            }
            return false
        }
        #expect(origin.requests("/mute").count == 1, "a fresh connection's failure must not be retried")
        #expect(client.connectionsOpened == 1)
    }

    /// Content-Length promises more than arrives: truncatedBody, with the prefix delivered intact.
    @Test func truncatedContentLengthBodyIsAWireError() throws {
        let origin = try FaultOrigin()
        origin.serve("/short", .resource(Resource(size: 1 << 20, seed: 3, faults: [.closeAfter(bytes: 100_000, times: 1)])))
        let client = try makeTestClient()

        let delivered = LockedBox(0)
        let error = #expect(throws: WireError.self) {
            try fetch(client, origin.url("/short"), onBodyBytes: { count in delivered.withLock { $0 = count } })
        }
        #expect(error?.code == .truncatedBody)
        #expect(delivered.value == 100_000)
    }

    /// Chunk extensions are ignored and trailers consumed (RFC 9112 §7.1.1, §7.1.2); the body arrives
    /// intact even when the framing is split across many small reads, and the connection stays usable.
    @Test func chunkedBodyWithExtensionsAndTrailersIsDeliveredIntact() throws {
        let origin = try FaultOrigin()
        let response = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n"
            + "5;name=value\r\nhello\r\n"
            + "7;a=\"quoted;value\";b\r\n, world\r\n"
            + "000001 ; spaced = ext\r\n!\r\n"
            + "0;last=1\r\nX-Checksum: abc123\r\nX-Other: 2\r\n\r\n"
        origin.serve("/chunked", .script { _, connection in
            try connection.writeStuttered(Array(response.utf8), pieceSize: 3, pause: 0.0005)
            connection.keepsAlive = true
        })
        origin.serve("/after", .resource(Resource(body: Array("after".utf8))))
        let client = try makeTestClient()

        let chunked = try fetch(client, origin.url("/chunked"))
        #expect(String(decoding: chunked.body, as: UTF8.self) == "hello, world!")
        #expect(chunked.summary.bodyBytes == 13)
        #expect(chunked.summary.connectionKeptAlive)
        let after = try fetch(client, origin.url("/after"))
        #expect(after.body == Array("after".utf8), "the trailer section must be consumed exactly")
        #expect(after.summary.connectionReused)
    }

    @Test func cancellingFromAnotherThreadDuringAStalledBodyEndsPromptly() throws {
        let origin = try FaultOrigin()
        origin.serve("/stall", .resource(Resource(size: 1 << 20, faults: [.stallAfter(bytes: 64 << 10, seconds: 30, times: 1)])))
        let client = try makeTestClient(idleTimeout: .seconds(60))
        let token = CancellationToken()
        let firstBytes = DispatchSemaphore(value: 0)
        let cancelledAt = LockedBox<Date?>(nil)
        let canceller = Thread {
            firstBytes.wait()
            // Let the exchange reach the stall (64 KiB arrive, then nothing for 30 s).
            Thread.sleep(forTimeInterval: 0.2)
            cancelledAt.withLock { $0 = Date() }
            token.cancel()
        }
        canceller.start()

        let signalled = LockedBox(false)
        let error = #expect(throws: TransportError.self) {
            try fetch(client, origin.url("/stall"), cancellation: token) { _ in
                if !signalled.withLock({ let was = $0; $0 = true; return was }) { firstBytes.signal() }
            }
        }
        // The stall lasts 30 s; `.cancelled` (not a timeout) shows shutdown(2) woke poll (no timed
        // assertion, issue #20).
        #expect(error?.code == .cancelled)
        #expect(cancelledAt.value != nil)
        #expect(token.isCancelled)
        // A cancelled token stays cancelled: the next exchange fails before sending anything.
        let again = #expect(throws: TransportError.self) { try fetch(client, origin.url("/stall"), cancellation: token) }
        #expect(again?.code == .cancelled)
        #expect(origin.requests("/stall").count == 1)
    }

    @Test func stalledServerHitsTheIdleTimeout() throws {
        let origin = try FaultOrigin()
        origin.serve("/stall", .resource(Resource(size: 1 << 20, faults: [.stallAfter(bytes: 10_000, seconds: 30, times: 1)])))
        let client = try makeTestClient(idleTimeout: .milliseconds(500))

        let started = Date()
        let error = #expect(throws: TransportError.self) { try fetch(client, origin.url("/stall")) }
        let elapsed = Date().timeIntervalSince(started)
        #expect(error?.code == .readTimeout)
        #expect(error?.isTransient == true)
        #expect(elapsed >= 0.45, "the timeout fired after \(elapsed) s, before the idle timeout")
        #expect(elapsed < 10, "the timeout fired after \(elapsed) s, long after 0.5 s")
    }

    /// Interim 1xx responses are skipped (RFC 9110 §15.2); onHead sees only the final head.
    @Test func interimResponsesAreSkipped() throws {
        let origin = try FaultOrigin()
        let interim = "HTTP/1.1 100 Continue\r\n\r\n"
            + "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
        origin.serve("/hints", .script { _, connection in
            try connection.write(interim + scriptedOK("final"))
            connection.keepsAlive = true
        })
        let client = try makeTestClient()

        let response = try fetch(client, origin.url("/hints"))
        #expect(response.heads.map(\.status) == [200])
        #expect(response.body == Array("final".utf8))
        #expect(response.summary.head.status == 200)
        #expect(response.summary.connectionKeptAlive)
    }

    struct HeadLimitCase: Sendable, CustomTestStringConvertible {
        var limit: Int
        var headBytes: Int
        var testDescription: String { "\(headBytes)-byte head, limit \(limit)" }
    }

    @Test(arguments: [
        HeadLimitCase(limit: ParserLimits.default.maxHeadBytes, headBytes: 80_000),
        HeadLimitCase(limit: 1_024, headBytes: 2_000),
    ])
    func responseHeadOverTheLimitIsRejected(_ limits: HeadLimitCase) throws {
        let origin = try FaultOrigin()
        origin.serve("/huge", .resource(Resource(size: 100, faults: [.hugeHead(bytes: limits.headBytes)])))
        let client = try makeTestClient(parserLimits: ParserLimits(maxHeadBytes: limits.limit))

        let error = #expect(throws: WireError.self) { try fetch(client, origin.url("/huge")) }
        #expect(error?.code == .headTooLarge)
    }

    /// Bytes after a complete response that nobody asked for mean a confused server: the connection
    /// must not carry another request.
    @Test func bytesAfterACompleteResponseMakeTheConnectionNonReusable() throws {
        let origin = try FaultOrigin()
        origin.serve("/extra", .script { _, connection in
            try connection.write(scriptedOK("hello", extra: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbad"))
            connection.keepsAlive = true
        })
        let client = try makeTestClient()

        let first = try fetch(client, origin.url("/extra"))
        #expect(first.body == Array("hello".utf8))
        #expect(first.summary.connectionKeptAlive == false)
        let second = try fetch(client, origin.url("/extra"))
        #expect(second.body == Array("hello".utf8), "the stray bytes must never be read as the next response")
        #expect(second.summary.connectionReused == false)
        #expect(client.connectionsOpened == 2)
    }
}

/// Bounds on a response that never gets to its body (issue #13, defect 4): a head trickled byte by byte
/// inside the idle timeout, and interim responses without end.
@Suite("Response heads have an end", .offPool)
struct ResponseHeadBoundsTests {
    @Test func aHeadTrickledInsideTheIdleTimeoutHitsTheHeadDeadline() throws {
        let origin = try FaultOrigin()
        origin.serve("/trickle", .script { _, connection in
            // One byte every 200 ms: never idle for the 5 s idle timeout, but the head takes ~8 s.
            try? connection.writeStuttered(
                Array("HTTP/1.1 200 OK\r\nX-Padding: \(String(repeating: "a", count: 40))\r\nContent-Length: 0\r\n\r\n".utf8),
                pieceSize: 1, pause: 0.2)
        })
        var configuration = DKHTTPClientConfiguration(idleTimeout: .seconds(5))
        configuration.headTimeout = .seconds(1)
        configuration.proxy = .direct
        let client = try DKHTTPClient(configuration: configuration)
        let error = try #require(throws: TransportError.self) { try fetch(client, origin.url("/trickle")) }
        #expect(error.code == .readTimeout)
        #expect(error.detail.contains("no complete response head"), "\(error.detail)")
    }

    @Test func endlessInterimResponsesEndInATypedError() throws {
        let origin = try FaultOrigin()
        origin.serve("/continue", .script { _, connection in
            for _ in 0..<100 { try? connection.write("HTTP/1.1 100 Continue\r\n\r\n") }
            try? connection.write("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        })
        let client = try makeTestClient()
        let error = try #require(throws: WireError.self) { try fetch(client, origin.url("/continue")) }
        #expect(error.code == .tooManyInterimResponses)
    }

    /// The CLI's buffer rule for many transfers at once: 64 MiB together, 1 MiB to 64 KiB each (issue #23).
    @Test(arguments: [(1, 1 << 20), (64, 1 << 20), (128, 512 << 10), (1024, 64 << 10), (4096, 64 << 10), (0, 1 << 20)])
    func receiveBuffersShrinkAsConnectionsGrow(connections: Int, expected: Int) {
        #expect(DKHTTPClientConfiguration.receiveBufferSize(forConcurrentConnections: connections) == expected)
    }
}

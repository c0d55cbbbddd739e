import Foundation
import HTTPWire
import Testing
import TestOrigin

@testable import HTTPClient

/// The connection pool behind `DKHTTPClient`: the per-origin bound, hand-over of freed connections to
/// waiting requests, idle eviction and `closeIdleConnections`.
@Suite("HTTPClient connection pool", .timeLimit(.minutes(1)))
struct ConnectionPoolTests {
    @Test func boundPerOriginHoldsUnderConcurrency() throws {
        let origin = try FaultOrigin()
        // ~128 ms per response, so eight threads really do contend for three connections.
        let resource = Resource(size: 256 << 10, seed: 5, bytesPerSecond: 2 << 20)
        origin.serve("/paced", .resource(resource))
        let bound = 3
        let client = try makeTestClient(maxConnectionsPerOrigin: bound, connectTimeout: .seconds(30))

        struct Tally {
            var inFlight = 0
            var maxInFlight = 0
            var serverPeak = 0
            var failures: [String] = []
            var connectionIDs: Set<Int> = []
        }
        let tally = LockedBox(Tally())
        let done = LockedBox(false)
        let monitor = Thread {
            while !done.value {
                let open = origin.openConnectionCount
                tally.withLock { $0.serverPeak = max($0.serverPeak, open) }
                usleep(2_000)
            }
        }
        monitor.start()

        runOnThreads(8) { _ in
            for _ in 0..<2 {
                tally.withLock {
                    $0.inFlight += 1
                    $0.maxInFlight = max($0.maxInFlight, $0.inFlight)
                }
                do {
                    let response = try fetch(client, origin.url("/paced"))
                    let intact = response.body.count == 256 << 10 && TestPattern.matches(response.body, offset: 0, seed: 5)
                    tally.withLock {
                        if !intact { $0.failures.append("a body differed from the resource") }
                        $0.connectionIDs.insert(response.summary.connectionID)
                    }
                } catch {
                    tally.withLock { $0.failures.append("\(error)") }
                }
                tally.withLock { $0.inFlight -= 1 }
            }
        }
        done.withLock { $0 = true }

        let result = tally.value
        #expect(result.failures.isEmpty, "\(result.failures)")
        #expect(result.maxInFlight > bound, "the test must actually make requests wait (\(result.maxInFlight) in flight)")
        #expect(origin.connectionCount <= bound, "the origin accepted \(origin.connectionCount) connections")
        #expect(client.connectionsOpened <= bound)
        #expect(result.connectionIDs.count <= bound)
        #expect(result.serverPeak <= bound)
        #expect(origin.requests("/paced").count == 16)
    }

    /// With one connection allowed, a second request waits and then gets exactly the connection the
    /// first one released.
    @Test func waitingRequestGetsTheFreedConnection() throws {
        let origin = try FaultOrigin()
        origin.serve("/slow", .resource(Resource(size: 512 << 10, seed: 1, bytesPerSecond: 1 << 20)))
        origin.serve("/fast", .resource(Resource(body: Array("fast".utf8))))
        let client = try makeTestClient(maxConnectionsPerOrigin: 1, connectTimeout: .seconds(30))

        let order = LockedBox<[String]>([])
        let slowSummary = LockedBox<ExchangeSummary?>(nil)
        let fastSummary = LockedBox<ExchangeSummary?>(nil)
        let slowHasHead = DispatchSemaphore(value: 0)
        runOnThreads(2) { index in
            if index == 0 {
                var signalled = false
                var received = 0
                let summary = try? client.execute(
                    DKHTTPRequest(url: try HTTPURL(origin.url("/slow"))),
                    onHead: { _ in
                        if !signalled { signalled = true; slowHasHead.signal() }
                        return .stream
                    },
                    onBody: { bytes in
                        // Recorded at the last body byte, while the exchange still holds the connection: after
                        // `execute` returns, the fast request may already have run on the freed connection.
                        received += bytes.count
                        if received == 512 << 10 { order.withLock { $0.append("slow") } }
                    })
                slowSummary.withLock { $0 = summary }
            } else {
                // Ask only once the first request holds the single connection.
                slowHasHead.wait()
                let response = try? fetch(client, origin.url("/fast"))
                fastSummary.withLock { $0 = response?.summary }
                order.withLock { $0.append("fast") }
            }
        }

        let slow = try #require(slowSummary.value)
        let fast = try #require(fastSummary.value)
        #expect(order.value == ["slow", "fast"], "the waiting request cannot finish before the connection is freed")
        #expect(fast.connectionReused)
        #expect(fast.connectionID == slow.connectionID)
        #expect(client.connectionsOpened == 1)
        #expect(origin.connectionCount == 1)
        let recorded = origin.requests()
        #expect(recorded.map(\.path) == ["/slow", "/fast"])
        #expect(recorded.map(\.indexOnConnection) == [0, 1])
    }

    /// A request that cannot get a connection before its connect deadline fails with connectTimeout;
    /// one whose token is cancelled while waiting fails with cancelled. Neither opens a connection.
    @Test func waitingForAConnectionEndsAtTheDeadlineOrOnCancellation() throws {
        let origin = try FaultOrigin()
        origin.serve("/held", .resource(Resource(size: 1 << 20, faults: [.stallAfter(bytes: 1_000, seconds: 30, times: 1)])))
        origin.serve("/other", .resource(Resource(body: Array("x".utf8))))
        let client = try makeTestClient(maxConnectionsPerOrigin: 1, connectTimeout: .seconds(2), idleTimeout: .seconds(60))
        let holder = CancellationToken()
        let holding = DispatchSemaphore(value: 0)
        let holderDone = DispatchSemaphore(value: 0)
        let holderThread = Thread {
            _ = try? fetch(client, origin.url("/held"), cancellation: holder) { count in
                if count == 1_000 { holding.signal() }
            }
            holderDone.signal()
        }
        holderThread.start()
        #expect(holding.wait(timeout: .now() + 10) == .success)

        let timeout = #expect(throws: TransportError.self) { try fetch(client, origin.url("/other")) }
        #expect(timeout?.code == .connectTimeout)

        let waiter = CancellationToken()
        let cancelThread = Thread {
            Thread.sleep(forTimeInterval: 0.1)
            waiter.cancel()
        }
        cancelThread.start()
        let cancelled = #expect(throws: TransportError.self) {
            try fetch(client, origin.url("/other"), cancellation: waiter)
        }
        // Cancelled 0.1 s in: `.cancelled`, not the wait's `.connectTimeout` (no timed assertion, issue #20).
        #expect(cancelled?.code == .cancelled)

        holder.cancel()
        #expect(holderDone.wait(timeout: .now() + 10) == .success)
        #expect(client.connectionsOpened == 1)
        #expect(origin.requests("/other").isEmpty)
        // The slot came back: a new request succeeds.
        #expect(try fetch(client, origin.url("/other")).body == Array("x".utf8))
    }

    struct LifetimeCase: Sendable, CustomTestStringConvertible {
        var lifetime: Double
        var reused: Bool
        var testDescription: String { "idle lifetime \(lifetime) s, reused: \(reused)" }
    }

    @Test(arguments: [LifetimeCase(lifetime: 0.2, reused: false), LifetimeCase(lifetime: 60, reused: true)])
    func idleConnectionsAreEvictedAfterTheirLifetime(_ lifetime: LifetimeCase) throws {
        let origin = try FaultOrigin()
        origin.serve("/f", .resource(Resource(body: Array("payload".utf8))))
        let client = try makeTestClient(idleConnectionLifetime: .milliseconds(Int(lifetime.lifetime * 1000)))
        let url = try HTTPURL(origin.url("/f"))

        let first = try fetch(client, origin.url("/f"))
        #expect(first.summary.connectionKeptAlive)
        #expect(client.pool.idleCount(for: url.origin) == 1)
        Thread.sleep(forTimeInterval: 0.6)
        let second = try fetch(client, origin.url("/f"))
        #expect(second.body == Array("payload".utf8))
        #expect(second.summary.connectionReused == lifetime.reused)
        #expect(client.connectionsOpened == (lifetime.reused ? 1 : 2))
        #expect(client.pool.idleCount(for: url.origin) == 1)
        if !lifetime.reused {
            // The expired connection was closed by the client, not left open.
            #expect(eventually { origin.openConnectionCount == 1 })
        }
    }

    @Test func closeIdleConnectionsClosesThemAndFreesTheirSlots() throws {
        let origin = try FaultOrigin()
        origin.serve("/f", .resource(Resource(body: Array("payload".utf8))))
        origin.serve("/g", .resource(Resource(body: Array("other".utf8))))
        // One connection per origin and a short wait: a slot leaked by closeIdleConnections would
        // make the third request time out.
        let client = try makeTestClient(maxConnectionsPerOrigin: 1, connectTimeout: .seconds(2))
        let origin1 = try HTTPURL(origin.url("/f")).origin

        _ = try fetch(client, origin.url("/f"))
        #expect(client.pool.idleCount(for: origin1) == 1)
        #expect(origin.openConnectionCount == 1)

        client.closeIdleConnections()
        #expect(client.pool.idleCount(for: origin1) == 0)
        #expect(eventually { origin.openConnectionCount == 0 }, "the origin should see the connection close")

        let again = try fetch(client, origin.url("/g"))
        #expect(again.body == Array("other".utf8))
        #expect(again.summary.connectionReused == false)
        let third = try fetch(client, origin.url("/f"))
        #expect(third.summary.connectionReused)
        #expect(client.connectionsOpened == 2)
        #expect(origin.connectionCount == 2)
    }
}

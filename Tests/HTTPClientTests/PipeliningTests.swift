import Foundation
import HTTPWire
import Testing
import TestOrigin

@testable import HTTPClient

/// `DKHTTPClient.execute(series:)`: a request sent ahead while the previous response is still arriving
/// (HTTP/1.1 pipelining, RFC 9112 §9.3.2), and what happens when a server closes instead of answering it
/// or never answers it. The origin's script answers ranges of a pattern file; after half of each body it
/// waits for the next request to arrive, which only a client that sends ahead can satisfy.
@Suite(.timeLimit(.minutes(1)))
struct PipeliningTests {
    static let total: Int64 = 1 << 20
    static let seed: UInt64 = 0x919E
    static let piece: Int64 = 64 << 10

    /// How the scripted origin treats a connection after answering a request.
    enum Ending: Sendable {
        /// Keeps it open for the next request.
        case keepAlive
        /// Closes it after the first response, without a `Connection: close` (a request sent ahead is lost).
        case closeAfterFirst
        /// On the first connection, resets it once the request sent ahead has arrived, in the middle of
        /// the first response (a server closing with a request unread); keeps later connections open.
        case resetOnTheFirstConnection
        /// On the first connection, ignores anything after the first response for `seconds`, then
        /// closes; keeps later connections open.
        case silentOnTheFirstConnection(seconds: Double)
    }

    /// What the origin saw: per request, its range, its connection, and whether the next request was
    /// already there when half of the response had been written.
    struct Seen: Sendable, Equatable {
        var range: Range<Int64>
        var connection: Int
        var nextArrivedEarly: Bool
    }

    /// - Parameter waitForNext: How long to wait for a request sent ahead on the first connection, and
    ///   on the others (a short wait where none is expected keeps the test fast).
    static func serveRanges(
        on origin: FaultOrigin, ending: Ending, waitForNext: (first: Double, others: Double), seen: LockedBox<[Seen]>
    ) {
        origin.serve(
            "/series",
            .script { request, connection in
                let value = request.header("Range") ?? ""
                let bounds = value.dropFirst("bytes=".count).split(separator: "-").compactMap { Int64($0) }
                guard value.hasPrefix("bytes="), bounds.count == 2 else { throw OriginError("bad range \(value)") }
                let range = bounds[0]..<(bounds[1] + 1)
                try connection.write(
                    "HTTP/1.1 206 Partial Content\r\nContent-Length: \(range.count)\r\n"
                        + "Content-Range: bytes \(range.lowerBound)-\(range.upperBound - 1)/\(total)\r\n\r\n")
                let half = Int64(range.count / 2)
                try connection.writePattern(offset: range.lowerBound, count: half, seed: seed)
                // The last range has no successor to wait for.
                let wait = connection.id == 1 ? waitForNext.first : waitForNext.others
                let early = range.upperBound < total && connection.waitForPipelinedInput(seconds: wait)
                if case .resetOnTheFirstConnection = ending, connection.id == 1 {
                    connection.reset()
                    return
                }
                // Recorded before the last bytes go out: once they have, the client may finish the series and
                // read `seen` before this thread would get to it.
                seen.withLock { $0.append(Seen(range: range, connection: connection.id, nextArrivedEarly: early)) }
                try connection.writePattern(offset: range.lowerBound + half, count: Int64(range.count) - half, seed: seed)
                switch ending {
                case .keepAlive:
                    connection.keepsAlive = true
                case .closeAfterFirst:
                    connection.keepsAlive = false
                case .resetOnTheFirstConnection:
                    connection.keepsAlive = true
                case .silentOnTheFirstConnection(let seconds):
                    if connection.id == 1 { connection.sleep(seconds: seconds) }
                    connection.keepsAlive = connection.id != 1
                }
            })
    }

    /// Fetches `[0, total)` as a series of `piece`-sized ranges; returns the bytes and the summaries.
    static func fetchSeries(_ client: DKHTTPClient, _ url: String) throws -> (body: [UInt8], summaries: [ExchangeSummary]) {
        func request(_ start: Int64) throws -> DKHTTPRequest {
            DKHTTPRequest(
                method: .GET, url: try HTTPURL(url),
                headers: DKHTTPHeaders([("Range", "bytes=\(start)-\(min(total, start + piece) - 1)")]))
        }
        var asked: Int64 = piece
        var body: [UInt8] = []
        var summaries: [ExchangeSummary] = []
        try client.execute(
            series: try request(0),
            next: { _ in
                guard asked < total, let next = try? request(asked) else { return nil }
                asked += piece
                return next
            },
            onHead: { head in
                #expect(head.status == 206)
                return .stream
            },
            onBody: { body.append(contentsOf: $0) },
            onEnd: { summaries.append($0) })
        return (body, summaries)
    }

    static var ranges: [Range<Int64>] { stride(from: 0, to: total, by: Int(piece)).map { $0..<min(total, $0 + piece) } }

    @Test func eachRequestIsSentAheadOnTheSameConnection() throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let seen = LockedBox<[Seen]>([])
        Self.serveRanges(on: origin, ending: .keepAlive, waitForNext: (5, 5), seen: seen)
        let client = try DKHTTPClient()
        let (body, summaries) = try Self.fetchSeries(client, origin.url("/series"))
        #expect(body.count == Int(Self.total))
        #expect(TestPattern.matches(body, offset: 0, seed: Self.seed), "the series' bytes differ from the file")
        #expect(seen.value.map(\.range) == Self.ranges, "every range asked once, in order")
        #expect(seen.value.dropLast().allSatisfy { $0.nextArrivedEarly }, "each next request arrived before its predecessor's end")
        #expect(Set(seen.value.map(\.connection)).count == 1)
        #expect(client.connectionsOpened == 1)
        #expect(summaries.count == Self.ranges.count)
        #expect(summaries.dropFirst().allSatisfy { $0.connectionReused })
        #expect(summaries.last?.connectionKeptAlive == true)
    }

    @Test func withPipeliningOffEachRequestWaitsForThePreviousResponse() throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let seen = LockedBox<[Seen]>([])
        Self.serveRanges(on: origin, ending: .keepAlive, waitForNext: (0.1, 0.1), seen: seen)
        var configuration = DKHTTPClientConfiguration()
        configuration.pipelining = false
        let client = try DKHTTPClient(configuration: configuration)
        let (body, _) = try Self.fetchSeries(client, origin.url("/series"))
        #expect(TestPattern.matches(body, offset: 0, seed: Self.seed) && body.count == Int(Self.total))
        #expect(seen.value.map(\.range) == Self.ranges)
        #expect(seen.value.allSatisfy { !$0.nextArrivedEarly })
        #expect(client.connectionsOpened == 1)
    }

    /// The origin closes each connection after one response without announcing it: the request sent
    /// ahead on the first is sent again on a new connection, and nothing is sent ahead to it again.
    @Test func aRequestSentAheadThatTheServerClosedOnIsSentAgainAndPipeliningStops() throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let seen = LockedBox<[Seen]>([])
        Self.serveRanges(on: origin, ending: .closeAfterFirst, waitForNext: (5, 0.1), seen: seen)
        let client = try DKHTTPClient()
        let (body, _) = try Self.fetchSeries(client, origin.url("/series"))
        #expect(TestPattern.matches(body, offset: 0, seed: Self.seed) && body.count == Int(Self.total))
        #expect(seen.value.map(\.range) == Self.ranges, "each range answered once (the one lost was never answered)")
        #expect(seen.value.first?.nextArrivedEarly == true, "the first connection got a request ahead")
        #expect(seen.value.dropFirst().allSatisfy { !$0.nextArrivedEarly }, "then nothing more was sent ahead")
        #expect(Set(seen.value.map(\.connection)).count == Self.ranges.count, "one connection per response")
        let route = ConnectionKey(origin: try HTTPURL(origin.url("/")).origin, proxy: nil)
        #expect(client.pool.refusesPipelining(route))
    }

    /// The origin neither answers nor closes after the first response: the request sent ahead times out
    /// (the idle timeout), is sent again on a new connection, and the series completes.
    @Test func aRequestSentAheadThatIsNeverAnsweredIsSentAgainAfterTheIdleTimeout() throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let seen = LockedBox<[Seen]>([])
        Self.serveRanges(on: origin, ending: .silentOnTheFirstConnection(seconds: 3), waitForNext: (5, 0.1), seen: seen)
        var configuration = DKHTTPClientConfiguration(idleTimeout: .milliseconds(300))
        configuration.headTimeout = .seconds(10)
        let client = try DKHTTPClient(configuration: configuration)
        let (body, _) = try Self.fetchSeries(client, origin.url("/series"))
        #expect(TestPattern.matches(body, offset: 0, seed: Self.seed) && body.count == Int(Self.total))
        #expect(seen.value.map(\.range) == Self.ranges)
        #expect(seen.value.first?.nextArrivedEarly == true)
        #expect(seen.value.dropFirst().allSatisfy { !$0.nextArrivedEarly })
    }

    /// The origin resets the first connection in the middle of a response while a request sent ahead
    /// waits on it: the error reaches the caller (a segment worker retries from what it wrote), and the
    /// client sends nothing ahead to that origin again.
    @Test func aConnectionResetWithARequestSentAheadEndsPipeliningToThatOrigin() throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        let seen = LockedBox<[Seen]>([])
        Self.serveRanges(on: origin, ending: .resetOnTheFirstConnection, waitForNext: (5, 0.1), seen: seen)
        let client = try DKHTTPClient()
        #expect(throws: TransportError.self) { try Self.fetchSeries(client, origin.url("/series")) }
        let (body, summaries) = try Self.fetchSeries(client, origin.url("/series"))
        #expect(TestPattern.matches(body, offset: 0, seed: Self.seed) && body.count == Int(Self.total))
        #expect(seen.value.map(\.range) == Self.ranges, "the reset response is not recorded; the rest once each")
        #expect(seen.value.allSatisfy { !$0.nextArrivedEarly })
        #expect(summaries.allSatisfy { !$0.wasSentAhead })
    }
}

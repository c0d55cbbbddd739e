import Glibc
import HTTPWire
import Testing
import TestThreads

@testable import HTTPClient

/// The pure Happy Eyeballs v2 decisions (RFC 8305) driven by a virtual clock, and the executor over
/// real loopback sockets.
@Suite(.offPool) struct HappyEyeballsTests {
    static let ms: UInt64 = 1_000_000

    @Test func interleavesFamiliesIPv6FirstOrThePreferredFamilyFirst() {
        let families: [HappyEyeballs.Family] = [.v4, .v4, .v6, .v6, .v6, .v4]
        #expect(HappyEyeballs.order(families: families, preferring: nil) == [2, 0, 3, 1, 4, 5])
        #expect(HappyEyeballs.order(families: families, preferring: .v4) == [0, 2, 1, 3, 5, 4])
        #expect(HappyEyeballs.order(families: [.v4, .v4], preferring: .v6) == [0, 1])
        #expect(HappyEyeballs.order(families: [], preferring: nil) == [])
    }

    @Test func startsTheNextAttemptEvery250msWhileEarlierOnesArePending() {
        var race = HappyEyeballs(count: 3)
        let t0: UInt64 = 1_000 * Self.ms
        #expect(race.start(now: t0) == [.startAttempt(0)])
        #expect(race.nextAttemptAt == t0 + 250 * Self.ms)
        // Early or spurious timer events start nothing.
        #expect(race.timerFired(now: t0 + 100 * Self.ms) == [])
        #expect(race.timerFired(now: t0 + 249 * Self.ms) == [])
        #expect(race.timerFired(now: t0 + 250 * Self.ms) == [.startAttempt(1)])
        #expect(race.nextAttemptAt == t0 + 500 * Self.ms)
        #expect(race.timerFired(now: t0 + 499 * Self.ms) == [])
        #expect(race.timerFired(now: t0 + 500 * Self.ms) == [.startAttempt(2)])
        #expect(race.nextAttemptAt == nil)
        #expect(race.pending == [0, 1, 2])
        #expect(race.timerFired(now: t0 + 900 * Self.ms) == [])
        // The second address wins: the other two are cancelled, the race is over.
        #expect(race.attemptConnected(1, now: t0 + 600 * Self.ms) == [.cancelAttempt(0), .cancelAttempt(2), .succeed(1)])
        #expect(race.isFinished && race.pending.isEmpty)
        #expect(race.attemptConnected(0, now: t0 + 700 * Self.ms) == [])
        #expect(race.attemptFailed(2, now: t0 + 700 * Self.ms) == [])
    }

    @Test func aFailureStartsTheNextAttemptAtOnceAndResetsTheDelay() {
        var race = HappyEyeballs(count: 3)
        _ = race.start(now: 0)
        #expect(race.attemptFailed(0, now: 10 * Self.ms) == [.startAttempt(1)])
        #expect(race.nextAttemptAt == 260 * Self.ms)
        #expect(race.attemptFailed(1, now: 20 * Self.ms) == [.startAttempt(2)])
        #expect(race.attemptFailed(2, now: 30 * Self.ms) == [.fail])
        #expect(race.isFinished)
    }

    @Test func theRaceFailsOnlyWhenEveryStartedAttemptFailed() {
        var race = HappyEyeballs(count: 2)
        _ = race.start(now: 0)
        _ = race.timerFired(now: 250 * Self.ms)
        #expect(race.attemptFailed(1, now: 300 * Self.ms) == [])
        #expect(!race.isFinished)
        #expect(race.attemptFailed(0, now: 400 * Self.ms) == [.fail])
    }

    @Test func aTimeoutCancelsWhatIsPendingAndNoAddressesFailsAtOnce() {
        var race = HappyEyeballs(count: 2)
        _ = race.start(now: 0)
        _ = race.timerFired(now: 250 * Self.ms)
        #expect(race.timedOut() == [.cancelAttempt(0), .cancelAttempt(1), .fail])
        var empty = HappyEyeballs(count: 0)
        #expect(empty.start(now: 0) == [.fail])
    }

    /// Nothing listens on [::1] at the listener's port: the IPv6 attempt is refused and IPv4 starts at
    /// once (no 250 ms wait) and wins. (A black-holed IPv6 address: HappyEyeballsNamespaceTests.)
    @Test func refusedFirstAddressFallsBackToTheNextAtOnce() throws {
        let listener = try #require(LoopbackListener(host: "127.0.0.1"))
        let connection = try Connection.connect(
            host: "dual.test", port: listener.port, tls: nil, serverName: nil, deadline: .after(seconds: 10),
            options: ConnectOptions(addressOverride: ["::1", "127.0.0.1"]))
        defer { connection.close() }
        #expect(connection.addressFamily == .ipv4)
        #expect(connection.connectAttempts.map(\.outcome) == [.failed, .connected])
        #expect(connection.connectAttempts.map(\.family) == [.ipv6, .ipv4])
    }

    @Test func addressFamilyRestrictionFiltersAndSaysWhatIsMissing() throws {
        let listener = try #require(LoopbackListener(host: "127.0.0.1"))
        let connection = try Connection.connect(
            host: "dual.test", port: listener.port, tls: nil, serverName: nil, deadline: .after(seconds: 10),
            options: ConnectOptions(addressFamily: .ipv4, addressOverride: ["::1", "127.0.0.1"]))
        #expect(connection.connectAttempts.count == 1 && connection.addressFamily == .ipv4)
        connection.close()
        do {
            _ = try Connection.connect(
                host: "v4only.test", port: listener.port, tls: nil, serverName: nil, deadline: .after(seconds: 10),
                options: ConnectOptions(addressFamily: .ipv6, addressOverride: ["127.0.0.1"]))
            Issue.record("an IPv4-only host connected with -6")
        } catch {
            #expect(error.code == .resolveFailed)
            #expect(error.detail.contains("has no IPv6 address"))
        }
    }
}

import Testing

@testable import DownloadKit

/// The decision to send segment requests ahead (``SendAheadRule``), driven with made-up clocks.
@Suite struct SendAheadRuleTests {
    static let size: Int64 = 4 << 20

    /// One request sent at once: asked at `at`, head after `wait`, body of `size` bytes over `body` seconds.
    static func response(
        _ rule: inout SendAheadRule, at: Double, wait: Double, body: Double, bytes: Int64 = size, reused: Bool = true
    ) {
        rule.asked(at: at)
        rule.headArrived(at: at + wait)
        rule.responseEnded(at: at + wait + body, bytes: bytes, connectionReused: reused, wasSentAhead: false)
    }

    @Test func nothingIsSentAheadBeforeBothTheWaitAndTheRateAreMeasured() {
        var rule = SendAheadRule(requestSize: Self.size)
        #expect(!rule.sendsAhead)
        // A new connection's wait includes its connect: it does not count.
        Self.response(&rule, at: 0, wait: 0.2, body: 0.16, reused: false)
        #expect(rule.shortestWait == nil)
        #expect(!rule.sendsAhead)
    }

    @Test func aLoopbackTurnaroundIsNotWorthIt() {
        var rule = SendAheadRule(requestSize: Self.size)
        Self.response(&rule, at: 0, wait: 0.2, body: 0.16, reused: false)
        Self.response(&rule, at: 1, wait: 0.002, body: 0.16)
        #expect(!rule.sendsAhead, "2 ms of a 160 ms request")
    }

    @Test func aRoundTripOfAFifthOfTheRequestIsWorthIt() {
        var rule = SendAheadRule(requestSize: Self.size)
        Self.response(&rule, at: 0, wait: 0.06, body: 0.16, reused: false)
        Self.response(&rule, at: 1, wait: 0.03, body: 0.16)
        #expect(rule.sendsAhead, "30 ms of a 160 ms request")
        // A response to a request sent ahead has no wait of its own and changes nothing.
        rule.headArrived(at: 2)
        rule.responseEnded(at: 2.16, bytes: Self.size, connectionReused: true, wasSentAhead: true)
        #expect(abs((rule.shortestWait ?? 0) - 0.03) < 1e-9)
        #expect(rule.sendsAhead)
    }

    @Test func theShortestWaitAndTheLatestRateDecide() {
        var rule = SendAheadRule(requestSize: Self.size)
        Self.response(&rule, at: 0, wait: 0.03, body: 0.16)
        #expect(rule.sendsAhead)
        Self.response(&rule, at: 1, wait: 0.005, body: 0.16)
        #expect(!rule.sendsAhead, "one short wait shows the round trip is small")
        // The rate rises eightfold: the same 5 ms are now a quarter of a request.
        Self.response(&rule, at: 2, wait: 0.01, body: 0.02)
        #expect(rule.sendsAhead, "5 ms of a 20 ms request")
        // A short body (the last bytes of a segment) does not count as a rate.
        Self.response(&rule, at: 3, wait: 0.01, body: 1.0, bytes: 4096)
        #expect(rule.sendsAhead)
    }
}

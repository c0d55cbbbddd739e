import Testing

@testable import DownloadKitDecisions

/// The decision to send segment requests ahead (``SendAheadRule``), driven with made-up clocks.
@Suite struct SendAheadRuleTests {
    static let size: Int64 = 4 << 20

    /// One request sent at once: written at `at`, head after `wait`, body of `bytes` over `body` seconds.
    static func response(_ rule: inout SendAheadRule, at: Double, wait: Double, body: Double, bytes: Int64 = size) {
        rule.sent(at: at)
        rule.headArrived(at: at + wait)
        rule.responseEnded(at: at + wait + body, bytes: bytes)
    }

    @Test func nothingIsSentAheadBeforeBothTheWaitAndTheRateAreMeasured() {
        var rule = SendAheadRule(requestSize: Self.size)
        #expect(!rule.sendsAhead)
        rule.sent(at: 0)
        rule.headArrived(at: 0.05)
        #expect(rule.shortestWait == 0.05)
        #expect(!rule.sendsAhead, "no rate yet")
        // The first bytes (nginx's first chunk is not paced) say nothing about the rate.
        rule.bodyProgress(at: 0.051, bytes: 128 << 10)
        #expect(rule.secondsPerByte == nil)
        #expect(!rule.sendsAhead)
    }

    @Test func aConnectionsFirstResponseDecidesForItsSecondRequest() {
        var rule = SendAheadRule(requestSize: Self.size)
        // Written on a new connection (the connect is over before `sent`): a 50 ms round trip, then 2 MiB
        // in 80 ms — half of the request still owed, while the first response arrives.
        rule.sent(at: 0)
        rule.headArrived(at: 0.05)
        rule.bodyProgress(at: 0.13, bytes: 2 << 20)
        #expect(rule.sendsAhead, "50 ms of a 160 ms request")
        // A response to a request sent ahead has no wait of its own and changes nothing.
        rule.responseEnded(at: 0.21, bytes: Self.size)
        rule.headArrived(at: 0.21)
        rule.responseEnded(at: 0.37, bytes: Self.size)
        #expect(rule.shortestWait == 0.05)
        #expect(rule.sendsAhead)
    }

    @Test func aLoopbackTurnaroundIsNotWorthIt() {
        var rule = SendAheadRule(requestSize: Self.size)
        Self.response(&rule, at: 0, wait: 0.002, body: 0.16)
        #expect(!rule.sendsAhead, "2 ms of a 160 ms request")
        rule.sent(at: 1)
        rule.headArrived(at: 1.001)
        rule.bodyProgress(at: 1.081, bytes: 2 << 20)
        #expect(!rule.sendsAhead)
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
        // A rate measured while a response arrives counts as the latest: it fell back eightfold.
        rule.sent(at: 5)
        rule.headArrived(at: 5.01)
        rule.bodyProgress(at: 5.09, bytes: 2 << 20)
        #expect(!rule.sendsAhead, "5 ms of a 160 ms request")
    }
}

import Testing

@testable import DownloadKit
@testable import DownloadKitDecisions

/// The shortest wait the segment workers of one download share (``SharedShortestWait``), folded into each
/// worker's ``SendAheadRule``.
@Suite struct SharedShortestWaitTests {
    static let size: Int64 = 4 << 20

    /// A connection of a download sharing `shared`: its first request written at 0, its head after
    /// `wait`, then 2 MiB in 80 ms (half of a 160 ms request still owed); it learns what the others
    /// measured at the head, as a segment worker does, and again before it decides.
    static func connection(_ shared: SharedShortestWait, wait: Double, learns: Bool = true) -> SendAheadRule {
        var rule = SendAheadRule(requestSize: size)
        rule.sent(at: 0)
        rule.headArrived(at: wait)
        if learns { rule.learned(shortestWait: shared.fold(rule.shortestWait)) }
        rule.bodyProgress(at: wait + 0.08, bytes: 2 << 20)
        return rule
    }

    @Test func theShortestWaitOfAnyConnectionDecides() {
        // Loopback: one connection's first head came back at once, another's waited 40 ms behind the
        // origin's start-up — a quarter of its 160 ms request.
        let shared = SharedShortestWait()
        #expect(shared.fold(nil) == nil)
        _ = Self.connection(shared, wait: 0.001)
        var slow = Self.connection(shared, wait: 0.04, learns: false)
        #expect(slow.sendsAhead, "alone, its own first wait decides")
        slow.learned(shortestWait: shared.fold(slow.shortestWait))
        #expect(slow.shortestWait == 0.001)
        #expect(!slow.sendsAhead, "1 ms of a 160 ms request")
        #expect(shared.fold(nil) == 0.001)
        // Over a 50 ms path every connection waits at least the round trip: they still send ahead.
        let path = SharedShortestWait()
        _ = Self.connection(path, wait: 0.05)
        var second = Self.connection(path, wait: 0.09)
        #expect(second.shortestWait == 0.05)
        #expect(second.sendsAhead, "50 ms of a 160 ms request")
        // Learning nothing changes nothing.
        second.learned(shortestWait: nil)
        #expect(second.shortestWait == 0.05)
    }
}

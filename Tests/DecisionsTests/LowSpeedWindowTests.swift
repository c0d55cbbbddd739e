import Testing

@testable import DownloadKitDecisions

/// The one low-speed rule (curl's `--speed-limit`/`--speed-time`) of the engine and the segment workers,
/// driven with a made-up clock: bytes and times in, a rate out when a window closed too slow.
@Suite struct LowSpeedWindowTests {
    struct Row: Sendable, CustomTestStringConvertible {
        var name: String
        var limit: Int
        var seconds: Double
        /// (bytes, now, the rate expected back).
        var steps: [(Int, Double, Double?)]
        var testDescription: String { name }
    }

    static let rows: [Row] = [
        Row(name: "off: a limit of 0 never judges", limit: 0, seconds: 1, steps: [(1, 1, nil), (1, 100, nil)]),
        Row(name: "an open window judges nothing", limit: 1000, seconds: 10, steps: [(10, 1, nil), (10, 5, nil), (10, 10.9, nil)]),
        Row(name: "a window that closes below the limit answers its rate", limit: 1000, seconds: 10,
            steps: [(100, 1, nil), (400, 6, nil), (500, 11, 100)]),
        Row(name: "a window at the limit passes and a new one starts where it closed", limit: 100, seconds: 2,
            steps: [(0, 1, nil), (200, 3, nil), (100, 4, nil), (50, 5, 75)]),
        Row(name: "a late window averages over all of its time", limit: 100, seconds: 2,
            steps: [(0, 1, nil), (300, 5, 75)]),
    ]

    @Test(arguments: rows)
    func window(_ row: Row) {
        var window = LowSpeedWindow(limit: row.limit, seconds: row.seconds)
        for (index, step) in row.steps.enumerated() {
            #expect(window.record(step.0, now: step.1) == step.2, "step \(index)")
        }
    }

    @Test func resetStartsTheWindowAtTheNextRecord() {
        var window = LowSpeedWindow(limit: 1000, seconds: 10)
        #expect(window.record(0, now: 1) == nil)
        window.reset()
        #expect(window.record(0, now: 100) == nil)
        #expect(window.record(5000, now: 105) == nil)
        // Without the reset the window from 1 would have closed at 100 with nothing received.
        #expect(window.record(4000, now: 110) == 900)
    }
}

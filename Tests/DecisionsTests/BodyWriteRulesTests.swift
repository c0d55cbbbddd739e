import Testing

@testable import DownloadKitDecisions

/// The two rules the machine asks when a body is about to be written, as tables: the space to reserve for
/// the bytes still to come, and whether a body is gathered whole.
@Suite struct BodyWriteRulesTests {
    /// (total, offset, the configuration preallocates) → the reservation.
    @Test func theReservationCoversWhatIsLeft() {
        let rows: [(total: Int64?, offset: Int64, preallocation: Bool, expected: SpaceReservation?)] = [
            (nil, 0, true, nil),
            (5000, 5000, true, nil),
            (5000, 6000, true, nil),
            (5000, 0, true, SpaceReservation(offset: 0, length: 5000, preallocates: false)),
            (5000, 1000, true, SpaceReservation(offset: 1000, length: 4000, preallocates: false)),
            ((1 << 20) + 10, 10, true, SpaceReservation(offset: 10, length: 1 << 20, preallocates: true)),
            ((1 << 20) + 10, 11, true, SpaceReservation(offset: 11, length: (1 << 20) - 1, preallocates: false)),
            (8 << 20, 0, false, SpaceReservation(offset: 0, length: 8 << 20, preallocates: false)),
        ]
        for row in rows {
            #expect(
                SpaceReservation.forRemaining(of: row.total, from: row.offset, preallocation: row.preallocation) == row.expected,
                "\(row)")
        }
    }

    /// (remaining, offset) → gathered, with a 64 KiB minimum, a 256 KiB buffer and 4 KiB blocks.
    @Test func aSmallBodyIsGatheredWhenItFitsFromItsBlock() {
        let rule = SmallBodyRule(minimum: 64 << 10, capacity: 256 << 10, alignment: 4096)
        let rows: [(remaining: Int64, offset: Int64, gathers: Bool)] = [
            ((64 << 10) - 1, 0, false),
            (64 << 10, 0, true),
            (256 << 10, 0, true),
            ((256 << 10) + 1, 0, false),
            (256 << 10, 4096, true),
            (256 << 10, 4097, false),
            ((256 << 10) - 1, 4097, true),
            (100_000, 8191, true),
        ]
        for row in rows {
            #expect(rule.gathers(remaining: row.remaining, at: row.offset) == row.gathers, "\(row)")
        }
    }
}

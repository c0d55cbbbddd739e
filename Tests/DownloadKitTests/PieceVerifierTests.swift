@_spi(DownloadKitInternal) @testable import DownloadKit
import HTTPClient
import Testing
import TestThreads

/// Piece checksums as a table (docs/MIRRORS.md, "Piece checksums"): credits and checks in, decisions out,
/// no socket, no file. Pieces of 100 bytes over 350 bytes: 0–99, 100–199, 200–299, 300–349.
@Suite(.offPool) struct PieceVerifierTests {
    enum Step: Sendable {
        /// Bytes credited from a source; the pieces this completes.
        case credit(Range<Int64>, from: Int, completes: [Int])
        /// A piece hashed good or bad, with the eligible sources; the decision expected.
        case check(Int, good: Bool, eligible: [Int], PieceVerifier.Decision)
    }

    struct Row: Sendable, CustomTestStringConvertible {
        var name: String
        var sources = 3
        var steps: [Step]
        var testDescription: String { name }
    }

    static let verified = PieceVerifier.Decision(next: .verified)

    static let rows: [Row] = [
        Row(name: "a good piece is verified", steps: [
            .credit(0..<100, from: 1, completes: [0]),
            .check(0, good: true, eligible: [0, 1, 2], verified),
        ]),
        Row(name: "a piece written by two credits is complete at the second", steps: [
            .credit(0..<60, from: 0, completes: []),
            .credit(60..<150, from: 1, completes: [0]),
            .credit(150..<350, from: 1, completes: [1, 2, 3]),
        ]),
        Row(name: "a bad piece is fetched from another source; its sender is demoted", steps: [
            .credit(0..<100, from: 1, completes: [0]),
            .check(0, good: false, eligible: [0, 1, 2], .init(next: .refetch(from: 0), demote: [1])),
            .check(0, good: true, eligible: [0, 1, 2], verified),
        ]),
        Row(name: "a second bad piece drops its sender", steps: [
            .credit(0..<200, from: 1, completes: [0, 1]),
            .check(0, good: false, eligible: [0, 1, 2], .init(next: .refetch(from: 0), demote: [1])),
            .check(0, good: true, eligible: [0, 1, 2], verified),
            .check(1, good: false, eligible: [0, 1, 2], .init(next: .refetch(from: 0), drop: [1: 2])),
            .check(1, good: true, eligible: [0, 2], verified),
        ]),
        Row(name: "a demoted source is asked last", steps: [
            .credit(0..<100, from: 0, completes: [0]),
            .check(0, good: false, eligible: [0, 1, 2], .init(next: .refetch(from: 1), demote: [0])),
            .check(0, good: true, eligible: [0, 1, 2], verified),
            .credit(100..<200, from: 2, completes: [1]),
            .check(1, good: false, eligible: [0, 1, 2], .init(next: .refetch(from: 1), demote: [2])),
        ]),
        Row(name: "a copy that is bad again goes to the next source that sent none", steps: [
            .credit(0..<100, from: 1, completes: [0]),
            .check(0, good: false, eligible: [0, 1, 2], .init(next: .refetch(from: 0), demote: [1])),
            .check(0, good: false, eligible: [0, 1, 2], .init(next: .refetch(from: 2), demote: [0])),
            .check(0, good: true, eligible: [0, 1, 2], verified),
        ]),
        Row(name: "a piece written by a suspect and a clean source counts against the suspect only", steps: [
            .credit(0..<100, from: 2, completes: [0]),
            .check(0, good: false, eligible: [0, 1, 2], .init(next: .refetch(from: 0), demote: [2])),
            .check(0, good: true, eligible: [0, 1, 2], verified),
            .credit(100..<150, from: 2, completes: []),
            .credit(150..<200, from: 1, completes: [1]),
            .check(1, good: false, eligible: [0, 1, 2], .init(next: .refetch(from: 0), drop: [2: 2])),
        ]),
        Row(name: "one source: the same once more, then the piece fails", sources: 1, steps: [
            .credit(0..<100, from: 0, completes: [0]),
            .check(0, good: false, eligible: [0], .init(next: .refetch(from: 0), demote: [0])),
            .check(0, good: false, eligible: [0], .init(next: .fail)),
        ]),
        Row(name: "the last eligible source is not dropped; it is asked once more", steps: [
            .credit(0..<200, from: 2, completes: [0, 1]),
            .check(0, good: false, eligible: [2], .init(next: .refetch(from: 2), demote: [2])),
            .check(0, good: true, eligible: [2], verified),
            .check(1, good: false, eligible: [2], .init(next: .refetch(from: 2))),
            .check(1, good: false, eligible: [2], .init(next: .fail)),
        ]),
        Row(name: "every source sent a bad copy twice: the piece fails", sources: 2, steps: [
            .credit(300..<350, from: 0, completes: [3]),
            .check(3, good: false, eligible: [0, 1], .init(next: .refetch(from: 1), demote: [0])),
            .check(3, good: false, eligible: [0, 1], .init(next: .refetch(from: 0), demote: [1])),
            .check(3, good: false, eligible: [1], .init(next: .refetch(from: 1))),
            .check(3, good: false, eligible: [1], .init(next: .fail)),
        ]),
    ]

    @Test(arguments: rows) func decisions(_ row: Row) {
        var verifier = PieceVerifier(pieceLength: 100, total: 350, sourceCount: row.sources)
        for (index, step) in row.steps.enumerated() {
            switch step {
            case .credit(let range, let source, let completes):
                #expect(verifier.credit(range, from: source) == completes, "step \(index)")
            case .check(let piece, let good, let eligible, let decision):
                #expect(verifier.checked(piece, good: good, eligible: eligible) == decision, "step \(index)")
            }
        }
    }

    /// Resume: the journal's verified set is trusted only for pieces the resumed bytes cover; the other
    /// covered pieces are checked from disk; a bad one is open again with nothing credited.
    @Test func resumeTrustsOnlyRecordedPiecesItCovers() {
        var verifier = PieceVerifier(pieceLength: 100, total: 350, sourceCount: 2, runs: [0..<250], verified: [0, 2])
        #expect(verifier.states == [.verified, .checking, .open, .open])
        #expect(verifier.unchecked == [1])
        verifier.resumeChecked(1, good: false)
        #expect(verifier.states[1] == .open)
        #expect(verifier.credit(100..<200, from: 1) == [1])
        #expect(verifier.credit(250..<350, from: 0) == [2, 3])
        #expect(!verifier.allVerified)
    }

    @Test func countsPerSource() {
        var verifier = PieceVerifier(pieceLength: 100, total: 350, sourceCount: 3)
        _ = verifier.credit(0..<100, from: 2)
        _ = verifier.checked(0, good: false, eligible: [0, 1, 2])
        _ = verifier.checked(0, good: true, eligible: [0, 1, 2])
        #expect(verifier.badPieces == [0, 0, 1])
        #expect(verifier.refetched == [1, 0, 0])
        #expect(verifier.badCopyCount(0) == 1)
    }

    @Test func pieceTableIsValidatedAgainstTheLength() {
        let table = PieceChecksums(algorithm: .sha256, pieceLength: 100, digests: Array(repeating: [UInt8](repeating: 0, count: 32), count: 4))
        #expect(throws: Never.self) { try table.validate(total: 350) }
        #expect(table.range(ofPiece: 3, total: 350) == 300..<350)
        for total: Int64 in [300, 401] {
            #expect { try table.validate(total: total) } throws: { error in
                (error as? DownloadError)?.code == .invalidPieceChecksums && "\(error)".contains("expected \((total - 1) / 100 + 1)")
            }
        }
        let short = PieceChecksums(algorithm: .sha256, pieceLength: 100, digests: [[1, 2, 3]])
        #expect { try short.validate() } throws: { error in
            (error as? DownloadError)?.code == .invalidPieceChecksums && "\(error)".contains("piece 0 has 3 bytes")
        }
        let zero = PieceChecksums(algorithm: .sha256, pieceLength: 0, digests: [])
        #expect { try zero.validate() } throws: { ($0 as? DownloadError)?.code == .invalidPieceChecksums }
    }

    /// Verified-piece records: kept through the journal's checks, ignored for another piece table.
    @Test func journalRecordsVerifiedPiecesOfItsTableOnly() {
        let boot = "boot-1"
        var bytes = SegmentJournal.encode(magic: 0x484A_4B44, hashOfBoot(boot), 350)
        bytes += SegmentJournal.encode(magic: 0x524A_4B44, 0, 200)
        bytes += SegmentJournal.encode(magic: 0x564A_4B44, 0, 77)
        bytes += SegmentJournal.encode(magic: 0x564A_4B44, 1, 77)
        bytes += SegmentJournal.encode(magic: 0x564A_4B44, 2, 78)
        #expect(SegmentJournal.verifiedPieces(bytes, bootID: boot, total: 350, fingerprint: 77) == [0, 1])
        #expect(SegmentJournal.verifiedPieces(bytes, bootID: boot, total: 350, fingerprint: 79) == [])
        #expect(SegmentJournal.parse(bytes, bootID: boot, total: 350) == [0..<200])
    }

    func hashOfBoot(_ boot: String) -> Int64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in boot.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01B3 }
        return Int64(bitPattern: hash)
    }

    /// Range records survive garbage and torn records, and need the same boot and total.
    @Test func journalRecordsSurviveGarbageAndTornRecordsAndNeedTheSameBootAndTotal() {
        let boot = "boot-a"
        var bytes = SegmentJournal.encode(magic: 0x484A_4B44, hashOfBoot(boot), 1000)
        bytes += SegmentJournal.encode(magic: 0x524A_4B44, 0, 100)
        bytes += Array(SegmentJournal.encode(magic: 0x524A_4B44, 100, 200).prefix(17))  // torn
        bytes += [0xFF, 0x00, 0x13]  // garbage
        bytes += SegmentJournal.encode(magic: 0x524A_4B44, 300, 2000)  // clipped to the total
        var flipped = SegmentJournal.encode(magic: 0x524A_4B44, 500, 600)
        flipped[9] ^= 0x40  // a flipped bit fails the checksum
        bytes += flipped
        #expect(SegmentJournal.parse(bytes, bootID: boot, total: 1000) == [0..<100, 300..<1000])
        #expect(SegmentJournal.parse(bytes, bootID: "boot-b", total: 1000).isEmpty, "another boot: not trusted")
        #expect(SegmentJournal.parse(bytes, bootID: boot, total: 999).isEmpty, "another length: not trusted")
        #expect(SegmentJournal.parse(bytes, bootID: nil, total: 1000).isEmpty)
    }
}

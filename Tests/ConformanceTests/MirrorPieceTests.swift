import DownloadKit
import Foundation
import Glibc
import HTTPClient
import HTTPWire
import Testing
import TestOrigin

/// Piece checksums end to end (issue #48, docs/MIRRORS.md "Piece checksums"): fault origins on private
/// ports, one of them corrupting bytes (`Fault.corruptBytes`), each origin's log witnessing what it was
/// asked for. 12 MiB in 1 MiB pieces over three 4 MiB segments: one request per segment and no steal
/// (the minimum segment is 4 MiB), so every extra request in the logs is a piece fetched again.
@Suite(.timeLimit(.minutes(3)))
struct MirrorPieceTests {
    static let size: Int64 = 12 << 20
    static let piece: Int64 = 1 << 20
    static let seed: UInt64 = 0x50

    static func table(seed: UInt64 = seed, size: Int64 = size) -> PieceChecksums {
        let count = Int((size - 1) / piece + 1)
        let digests = (0..<count).map { index -> [UInt8] in
            let start = Int64(index) * piece
            return DKDigest.hash(.sha256, TestPattern.bytes(offset: start, count: Int(min(piece, size - start)), seed: seed))
        }
        return PieceChecksums(algorithm: .sha256, pieceLength: piece, digests: digests)
    }

    static func configuration() -> DownloadConfiguration {
        var configuration = DownloadConfiguration(
            retries: 3, retryBaseDelay: .milliseconds(10), maxRetryDelay: .milliseconds(50),
            progressInterval: .milliseconds(20),
            client: DKHTTPClientConfiguration(connectTimeout: .seconds(20), idleTimeout: .seconds(20)))
        configuration.connections = 3
        configuration.connectionsPerSource = 1
        configuration.minimumSegmentSize = 4 << 20
        return configuration
    }

    /// A pattern resource paced so the three segments overlap in time, corrupting `corrupt` ranges.
    static func resource(corrupt: [Range<Int64>] = []) -> Resource {
        Resource(size: size, seed: seed, bytesPerSecond: 6 << 20, faults: corrupt.map { .corruptBytes($0) })
    }

    /// The ranges asked of `origin` (the probe's `bytes=0-0` left out).
    static func ranges(_ origin: FaultOrigin, _ path: String) -> [Range<Int64>] {
        origin.requests(path).compactMap { request -> Range<Int64>? in
            guard let range = request.header("Range"), range != "bytes=0-0", range.hasPrefix("bytes=") else { return nil }
            let parts = range.dropFirst(6).split(separator: "-")
            guard parts.count == 2, let first = Int64(parts[0]), let last = Int64(parts[1]) else { return nil }
            return first..<last + 1
        }
    }

    static func pieceRange(_ index: Int64) -> Range<Int64> { index * piece..<(index + 1) * piece }

    /// Downloads the file from three fault origins, the third corrupting `corrupt`, and checks it is right
    /// and alone in its directory.
    static func downloadWithCorruptMirror(_ corrupt: [Range<Int64>]) async throws -> ([FaultOrigin], DownloadResult, [DownloadEvent]) {
        let origins = try (0..<3).map { _ in try FaultOrigin() }
        for (index, origin) in origins.enumerated() {
            origin.serve("/p", .resource(resource(corrupt: index == 2 ? corrupt : [])))
        }
        let dir = try ScratchDirectory()
        var request = DownloadRequest(url: origins[0].url("/p"), destination: .file(dir.file("p")))
        request.mirrors = [origins[1].url("/p"), origins[2].url("/p")]
        request.pieceChecksums = table()
        let (result, events) = await runDownload(request, configuration: configuration())
        let done = try result.get()
        #expect(fileMatchesPattern(dir.file("p"), size: size, seed: seed))
        #expect(dir.contents == ["p"])
        return (origins, done, events)
    }

    /// One mirror corrupts 16 bytes at the start of each segment; it serves one segment, so exactly one
    /// piece comes bad from it. The file ends right; that piece alone is asked again, of another origin,
    /// and the mirror is demoted, not dropped.
    @Test func aCorruptMirrorCostsOnePiece() async throws {
        let (origins, done, events) = try await Self.downloadWithCorruptMirror([0, 4, 8].map { Int64($0) << 20 }.map { $0..<$0 + 16 })
        // The corrupt mirror served one segment; the piece at its start is the bad one.
        let corruptAsked = Self.ranges(origins[2], "/p")
        let bad = try #require(corruptAsked.first.map { $0.lowerBound / Self.piece }, "\(corruptAsked)")
        let again = (0..<2).flatMap { Self.ranges(origins[$0], "/p") }.filter { $0 == Self.pieceRange(bad) }
        #expect(again.count == 1, "piece \(bad) asked again once, of a good origin: \(again)")
        let asked = (0..<3).flatMap { Self.ranges(origins[$0], "/p") }.reduce(Int64(0)) { $0 + Int64($1.count) }
        #expect(asked == Self.size + Self.piece, "everything once, the bad piece twice: \(asked)")
        #expect(done.sources[2].badPieces == 1, "\(done.sources)")
        #expect(done.sources[2].dropReason == nil)
        #expect(done.sources.map(\.refetchedPieces).reduce(0, +) == 1)
        #expect(done.sources[2].refetchedPieces == 0)
        #expect(!events.contains { if case .stateChanged(_, .sourceDropped) = $0 { true } else { false } })
    }

    /// A mirror corrupting every piece sends two bad ones in its segment: dropped at the second with
    /// `.badPieces(count: 2)` (event and result), its bad pieces fetched again from the others (the piece
    /// it left half written too, blamed on it alone), the file right.
    @Test func aMirrorWithTwoBadPiecesIsDroppedWithItsReason() async throws {
        let (origins, done, events) = try await Self.downloadWithCorruptMirror(
            (0..<12).map { Int64($0) << 20 }.map { $0 + 100..<$0 + 116 })
        let drops = events.compactMap { event -> SourceDropReason? in
            if case .stateChanged(_, .sourceDropped(let source, let reason)) = event, source == origins[2].url("/p") { return reason }
            return nil
        }
        #expect(drops == [.badPieces(count: 2)])
        #expect(done.sources[2].dropReason == .badPieces(count: 2))
        #expect(done.sources[2].badPieces >= 2, "\(done.sources)")
        #expect(done.sources[0].badPieces == 0 && done.sources[1].badPieces == 0, "\(done.sources)")
        #expect(done.sources.map(\.refetchedPieces).reduce(0, +) == done.sources[2].badPieces)
        #expect(done.sources[2].refetchedPieces == 0)
        #expect(done.sources.map(\.bytes).reduce(0, +) == Self.size)
    }

    /// One source whose piece 3 is always corrupt: asked once more, then the download fails with the
    /// typed error naming the piece; the verified pieces stay in the partial (resumable).
    @Test func aPieceNoSourceCanGiveFailsNamingIt() async throws {
        let origin = try FaultOrigin()
        origin.serve("/p", .resource(Self.resource(corrupt: [(3 << 20) + 5..<(3 << 20) + 6])))
        let dir = try ScratchDirectory()
        var request = DownloadRequest(url: origin.url("/p"), destination: .file(dir.file("p")))
        request.pieceChecksums = Self.table()
        let (result, _) = await runDownload(request, configuration: Self.configuration())
        guard case .failure(let error) = result else {
            Issue.record("a piece no source gives right must fail the download")
            return
        }
        #expect(error.code == .pieceChecksumMismatch, "\(error)")
        #expect(error.detail.contains("piece 3 (bytes 3145728-4194303)"), "\(error.detail)")
        #expect(error.category == .integrity)
        #expect(Self.ranges(origin, "/p").filter { $0 == Self.pieceRange(3) }.count == 1, "asked once more")
        #expect(dir.contents.contains("p.dkpart"), "\(dir.contents)")
        #expect(!dir.contents.contains("p"))
    }

    /// A server without ranges (one connection): a table of another count fails at the head, before a
    /// byte; a corrupt piece fails before the rename naming it, and nothing is kept (nothing can be
    /// fetched again alone); a right file passes.
    @Test func oneConnectionChecksEveryPieceBeforeTheRename() async throws {
        let origin = try FaultOrigin()
        func serve(_ path: String, corrupt: [Range<Int64>] = []) {
            var resource = Self.resource(corrupt: corrupt)
            resource.honorsRanges = false
            origin.serve(path, .resource(resource))
        }
        serve("/right")
        serve("/bad", corrupt: [(7 << 20) + 1..<(7 << 20) + 2])
        for (path, table, code) in [
            ("/right", Self.table(size: Self.size + 1), DownloadError.Code.invalidPieceChecksums),
            ("/bad", Self.table(), .pieceChecksumMismatch),
        ] {
            let dir = try ScratchDirectory()
            var request = DownloadRequest(url: origin.url(path), destination: .file(dir.file("p")))
            request.pieceChecksums = table
            let (result, _) = await runDownload(request, configuration: Self.configuration())
            guard case .failure(let error) = result else {
                Issue.record("\(path) must fail")
                continue
            }
            #expect(error.code == code, "\(error)")
            #expect(code != .pieceChecksumMismatch || error.detail.contains("piece 7 (bytes 7340032-8388607)"), "\(error.detail)")
            #expect(dir.contents.isEmpty, "\(dir.contents)")
        }
        let dir = try ScratchDirectory()
        var request = DownloadRequest(url: origin.url("/right"), destination: .file(dir.file("p")))
        request.pieceChecksums = Self.table()
        let (result, _) = await runDownload(request, configuration: Self.configuration())
        _ = try result.get()
        #expect(fileMatchesPattern(dir.file("p"), size: Self.size, seed: Self.seed))
    }

    /// A piece table of the wrong count for the served length: the typed error naming both counts, before
    /// any byte is written (nothing left in the directory).
    @Test func aPieceTableOfAnotherLengthIsRefusedBeforeAnyByte() async throws {
        let origin = try FaultOrigin()
        origin.serve("/p", .resource(Self.resource()))
        let dir = try ScratchDirectory()
        var request = DownloadRequest(url: origin.url("/p"), destination: .file(dir.file("p")))
        request.pieceChecksums = Self.table(size: Self.size - Self.piece)
        let (result, _) = await runDownload(request, configuration: Self.configuration())
        guard case .failure(let error) = result else {
            Issue.record("a piece table for another length must be refused")
            return
        }
        #expect(error.code == .invalidPieceChecksums, "\(error)")
        #expect(error.detail.contains("11 piece digests") && error.detail.contains("expected 12"), "\(error.detail)")
        #expect(Self.ranges(origin, "/p").isEmpty, "only the probe was sent")
        #expect(dir.contents.isEmpty, "\(dir.contents)")
    }
}

/// `downloadkit get --metalink` with piece hashes, killed with SIGKILL mid-run and run again.
@Suite(.timeLimit(.minutes(3)))
struct MirrorPieceCLITests {
    /// A Metalink 4 of the pattern file with its SHA-256 and its 1 MiB SHA-256 piece hashes.
    static func metalink(urls: [String]) -> String {
        let table = MirrorPieceTests.table()
        let whole = DKDigest.hex(DKDigest.hash(.sha256, TestPattern.bytes(offset: 0, count: Int(MirrorPieceTests.size), seed: MirrorPieceTests.seed)))
        let hashes = table.digests.map { "      <hash>\(DKDigest.hex($0))</hash>" }.joined(separator: "\n")
        let urlLines = urls.enumerated().map { "    <url priority=\"\($0.offset + 1)\">\($0.element)</url>" }.joined(separator: "\n")
        return """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <file name="k.bin">
                <size>\(MirrorPieceTests.size)</size>
                <hash type="sha-256">\(whole)</hash>
                <pieces length="\(MirrorPieceTests.piece)" type="sha-256">
            \(hashes)
                </pieces>
            \(urlLines)
              </file>
            </metalink>
            """
    }

    /// The pieces a segment journal records as verified (`DKJV` records: magic, 4 zero bytes, the piece
    /// index, the table's fingerprint, a check), read as the format in docs/MIRRORS.md describes it.
    static func verifiedPieces(inJournal path: String) -> Set<Int64> {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        let bytes = [UInt8](data)
        var pieces: Set<Int64> = []
        var offset = 32
        while offset + 32 <= bytes.count {
            if Array(bytes[offset..<offset + 8]) == [0x44, 0x4B, 0x4A, 0x56, 0, 0, 0, 0] {
                pieces.insert((0..<8).reduce(Int64(0)) { $0 | Int64(bytes[offset + 8 + $1]) << (8 * Int64($1)) })
            }
            offset += 32
        }
        return pieces
    }

    /// The summary names the corrupt URL's bad piece and the URL it was fetched again from; no "not
    /// verified" note for a document whose piece hashes the engine computes.
    @Test func summaryNamesTheBadPieceAndWhereItWasFetchedAgain() async throws {
        let origins = try (0..<3).map { _ in try FaultOrigin() }
        for (index, origin) in origins.enumerated() {
            let corrupt = index == 2 ? [0, 4, 8].map { Int64($0) << 20 }.map { $0..<$0 + 16 } : []
            origin.serve("/k.bin", .resource(MirrorPieceTests.resource(corrupt: corrupt)))
        }
        let executable = try #require(CLITests.executable)
        let dir = try ScratchDirectory()
        let document = try MetalinkCLITests.write(Self.metalink(urls: origins.map { $0.url("/k.bin") }), to: dir, "k.meta4")
        defer { try? FileManager.default.removeItem(atPath: document) }
        let run = try await CLITests.runOffPool(
            executable, ["get", "--metalink", document, "-o", dir.file("k.bin"), "--connections", "3", "--progress", "none"],
            in: dir, timeout: 90)
        #expect(run.exitCode == 0, "\(run.output)")
        #expect(fileMatchesPattern(dir.file("k.bin"), size: MirrorPieceTests.size, seed: MirrorPieceTests.seed))
        let lines = run.output.split(separator: "\n").filter { $0.hasPrefix("source ") || $0.contains(" source ") }
        #expect(lines.count == 3, "\(run.output)")
        #expect(lines.contains { $0.contains(origins[2].url("/k.bin")) && $0.contains("1 bad piece(s)") }, "\(run.output)")
        #expect(lines.filter { $0.contains("1 piece(s) re-fetched from it") }.count == 1, "\(run.output)")
        #expect(!run.output.contains("not verified"), "\(run.output)")
    }

    /// Three fault origins, the third corrupting the first bytes of every segment (one piece of those it
    /// serves): killed mid-run, the rerun ends with the right file, never asks for a piece the journal
    /// recorded as verified, and fetches again at most one request per connection.
    @Test func killedAndRerunEndsRightWithoutRefetchingVerifiedPieces() async throws {
        let origins = try (0..<3).map { _ in try FaultOrigin() }
        for (index, origin) in origins.enumerated() {
            let corrupt = index == 2 ? [0, 4, 8].map { Int64($0) << 20 }.map { $0..<$0 + 16 } : []
            origin.serve("/k.bin", .resource(Resource(
                size: MirrorPieceTests.size, seed: MirrorPieceTests.seed, bytesPerSecond: 2 << 20,
                faults: corrupt.map { .corruptBytes($0) })))
        }
        let executable = try #require(CLITests.executable)
        let dir = try ScratchDirectory()
        let document = try MetalinkCLITests.write(Self.metalink(urls: origins.map { $0.url("/k.bin") }), to: dir, "k.meta4")
        defer { try? FileManager.default.removeItem(atPath: document) }
        let arguments = ["get", "--metalink", document, "-o", dir.file("k.bin"), "--connections", "3", "--progress", "none"]
        let log = dir.path + "/../pieces-kill-\(UUID().uuidString).log"
        defer { try? FileManager.default.removeItem(atPath: log) }
        let child = try ChildProcess(executable, arguments, outputPath: log)
        // A verified piece in the journal, then some 300 ms more.
        let killed = try await MirrorCLITests.kill(child, once: { !Self.verifiedPieces(inJournal: dir.file("k.bin.dkjournal")).isEmpty }, thenAfter: 300_000)
        #expect(killed, "the first run was killed mid-transfer")
        let verified = Self.verifiedPieces(inJournal: dir.file("k.bin.dkjournal"))
        #expect(!verified.isEmpty)
        let before = origins.map { MirrorPieceTests.ranges($0, "/k.bin").count }
        let firstRun = origins.map { MirrorPieceTests.ranges($0, "/k.bin") }.flatMap { $0 }.reduce(Int64(0)) { $0 + Int64($1.count) }

        let rerun = try await CLITests.runOffPool(executable, arguments, in: dir, timeout: 90)
        #expect(rerun.exitCode == 0, "\(rerun.output)")
        #expect(fileMatchesPattern(dir.file("k.bin"), size: MirrorPieceTests.size, seed: MirrorPieceTests.seed))
        #expect(dir.contents == ["k.bin"])
        #expect(!rerun.output.contains("not verified"), "\(rerun.output)")
        let asked = origins.indices.flatMap { MirrorPieceTests.ranges(origins[$0], "/k.bin").dropFirst(before[$0]) }
        let again = asked.filter { range in verified.contains { MirrorPieceTests.pieceRange($0).overlaps(range) } }
        #expect(again.isEmpty, "the rerun asked for verified pieces \(verified.sorted()): \(again)")
        let rerunBytes = asked.reduce(Int64(0)) { $0 + Int64($1.count) }
        // Everything asked over both runs, less the file, less the bad piece(s) asked again: what the kill cost.
        let refetchedPieces = Int64(origins.indices.count)  // at most one bad piece per segment start
        let twice = firstRun + rerunBytes - MirrorPieceTests.size
        #expect(twice <= 3 * SegmentRequest.size + refetchedPieces * MirrorPieceTests.piece, "fetched twice: \(twice)")
    }
}

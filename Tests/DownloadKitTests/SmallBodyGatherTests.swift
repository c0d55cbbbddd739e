@testable import DownloadKit
import Foundation
import CDownloadKitSystem
import Glibc
import Testing
import TestOrigin

/// Small single-connection bodies gathered and written past the page cache (`SmallBodyGather`,
/// `DownloadConfiguration.directWrites`, issue #18): the buffer's block mapping, the pool's bound, and
/// real downloads — the right bytes, the pages not left cached, and nothing that arrived lost when the
/// connection drops mid-body.
@Suite(.timeLimit(.minutes(2)))
struct SmallBodyGatherTests {

    func pattern(_ count: Int, from offset: Int, seed: UInt64 = 5) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        bytes.withUnsafeMutableBytes { TestPattern.fill($0, offset: Int64(offset), seed: seed) }
        return bytes
    }

    @Test func onlyBodiesFromSixtyFourKiBToTheCapacityAreGathered() throws {
        #expect(SmallBodyGather(remaining: (64 << 10) - 1, at: 0) == nil)
        #expect(SmallBodyGather(remaining: Int64(SmallBodyGather.capacity) + 1, at: 0) == nil)
        // The offset's place in its block counts against the capacity.
        #expect(SmallBodyGather(remaining: Int64(SmallBodyGather.capacity), at: 4_097) == nil)
        #expect(SmallBodyGather(remaining: Int64(SmallBodyGather.capacity) - 1, at: 4_097) != nil)
        #expect(SmallBodyGather(remaining: 64 << 10, at: 0) != nil)
    }

    @Test func pendingBytesKeepTheirOrderAndAlignedOffsetsSitAtAlignedAddresses() throws {
        let start = 5_000
        let body = try #require(SmallBodyGather(remaining: 200_000, at: Int64(start)))
        let expected = pattern(200_000, from: start)
        var fed = 0
        for size in [1, 3_191, 70_000, 12, 40_000] {
            let piece = Array(expected[fed..<(fed + size)])
            #expect(piece.withUnsafeBytes { body.append($0, now: 0) })
            fed += size
        }
        #expect(Array(body.pending) == Array(expected[0..<fed]))
        // Write 3,192 bytes: the next pending byte is file offset 8,192, a block start, at an aligned address.
        body.consumed(3_192, now: 0)
        #expect(body.start == 8_192)
        #expect(Int(bitPattern: body.pending.baseAddress) % DirectFile.alignment == 0)
        #expect(Array(body.pending) == Array(expected[3_192..<fed]))
        // Then an unaligned amount: the rest moves to its block's place and stays in order.
        body.consumed(10_000, now: 0)
        #expect(body.start == Int64(start + 13_192))
        #expect(Int(bitPattern: body.pending.baseAddress) % DirectFile.alignment == Int(body.start) % DirectFile.alignment)
        let rest = Array(expected[fed..<200_000])
        #expect(rest.withUnsafeBytes { body.append($0, now: 0) })
        #expect(Array(body.pending) == Array(expected[13_192..<200_000]))
        // Past the capacity nothing is appended.
        #expect(!pattern(SmallBodyGather.capacity, from: 0).withUnsafeBytes { body.append($0, now: 0) })
    }

    /// Bytes received in place (``SmallBodyGather/freeSpace(limit:)``, ``SmallBodyGather/received(_:now:)``)
    /// land where ``SmallBodyGather/append(_:now:)`` would have put them, and keep their place when the
    /// ones before them are written.
    @Test func bytesReceivedInPlaceFollowThePendingOnesAndKeepTheirOrder() throws {
        let start = 5_000
        let body = try #require(SmallBodyGather(remaining: 200_000, at: Int64(start)))
        let expected = pattern(200_000, from: start)
        #expect(expected[0..<700].withUnsafeBytes { body.append($0, now: 0) })
        var fed = 700
        for size in [3_000, 60_000] {
            let space = body.freeSpace(limit: size)
            #expect(space.count == size)
            expected[fed..<(fed + size)].withUnsafeBytes { space.copyMemory(from: $0) }
            body.received(size, now: 1)
            fed += size
        }
        #expect(Array(body.pending) == Array(expected[0..<fed]))
        #expect(body.oldestArrival == 0, "the clock runs from the oldest pending byte")
        // The first 3,700 written (as when they waited a progress interval): the rest stays, counted from now.
        body.consumed(3_700, now: 2)
        #expect(Array(body.pending) == Array(expected[3_700..<fed]))
        #expect(body.oldestArrival == 2)
        let rest = 200_000 - fed
        let space = body.freeSpace(limit: .max)
        #expect(space.count >= rest, "the rest of the body always fits")
        expected[fed...].withUnsafeBytes { space.copyMemory(from: $0) }
        body.received(rest, now: 3)
        #expect(Array(body.pending) == Array(expected[3_700...]))
    }

    @Test func thePoolHandsOutAtMostItsLimitAndReusesWhatComesBack() throws {
        let pool = AlignedBufferPool(limit: 2)
        let first = try #require(pool.take())
        let second = try #require(pool.take())
        #expect(pool.take() == nil)
        #expect(Int(bitPattern: first) % DirectFile.alignment == 0 && Int(bitPattern: second) % DirectFile.alignment == 0)
        pool.giveBack(first)
        #expect(pool.take() == first)
        pool.giveBack(first)
        pool.giveBack(second)
    }

    @Test(arguments: [Int64(64 << 10), 200_123])
    func aSmallBodyIsWrittenPastThePageCacheAndEndsWithTheRightFile(size: Int64) async throws {
        let origin = try FaultOrigin()
        origin.serve("/small", .resource(Resource(size: size, seed: 12)))
        let dir = try ScratchDirectory()
        try #require(DirectFile.fileSystems.contains(fileSystemType(dir.path)), "the scratch directory is on ext4 or XFS on this project's machines")
        for direct in [true, false] {
            var configuration = testConfiguration()
            configuration.directWrites = direct
            let name = direct ? "direct" : "spliced"
            let (result, _) = await runDownload(
                DownloadRequest(url: origin.url("/small"), destination: .file(dir.file(name))), configuration: configuration)
            #expect(try result.get().bytes == size)
            // Direct: the whole blocks went past the page cache; only partial ones (the last, say) are cached.
            let resident = try residentShare(dir.file(name))
            if direct {
                #expect(resident < 0.15, "\(Int(resident * 100)) % of the pages are cached")
            } else {
                // The control shows that the probe sees cached pages. Not "over 90 %": this project's VMs
                // reclaim page cache hard (about 1 GB kept of 24), and under a sanitizer's memory use a
                // CI run found 14 of 16 pages left. Half is still far from what a direct run leaves.
                #expect(resident > 0.5, "\(Int(resident * 100)) % of the pages are cached")
            }
            #expect(fileMatchesPattern(dir.file(name), size: size, seed: 12))
        }
    }

    /// A checksum or a Content-MD5 no longer keeps a small body in the page cache: the digests read each
    /// gathered piece as it is written, and a wrong one still fails the download.
    @Test func aChecksummedSmallBodyIsGatheredAndVerified() async throws {
        let size: Int64 = 150_000
        let bytes = TestPattern.bytes(offset: 0, count: Int(size), seed: 18)
        let md5 = Base64.encode(DKDigest.hash(.md5, bytes))
        let origin = try FaultOrigin()
        origin.serve("/sum", .resource(Resource(size: size, seed: 18, contentMD5: md5)))
        origin.serve("/badmd5", .resource(Resource(size: size, seed: 18, contentMD5: Base64.encode([UInt8](repeating: 1, count: 16)))))
        // Cut once after 70,000 bytes: the digests go on across the retry's second body.
        origin.serve("/cut", .resource(Resource(size: size, seed: 18, faults: [.closeAfter(bytes: 70_000, times: 1)])))
        let dir = try ScratchDirectory()
        try #require(DirectFile.fileSystems.contains(fileSystemType(dir.path)), "the scratch directory is on ext4 or XFS on this project's machines")
        let hex = DKDigest.hex(DKDigest.hash(.sha256, bytes))
        let checksum = Checksum(algorithm: .sha256, expectedHex: hex)
        for path in ["/sum", "/cut"] {
            let name = "ok" + path.dropFirst()
            let (result, _) = await runDownload(
                DownloadRequest(url: origin.url(path), destination: .file(dir.file(name)), checksum: checksum))
            #expect(try result.get().checksumHex == hex)
            // Before anything reads the file back.
            let resident = try residentShare(dir.file(name))
            #expect(resident < 0.15, "\(Int(resident * 100)) % of the pages are cached: the body was not gathered")
            #expect(fileMatchesPattern(dir.file(name), size: size, seed: 18))
        }
        #expect(origin.requests("/cut").last?.header("Range") == "bytes=70000-")
        let wrong = Checksum(algorithm: .sha256, expectedHex: String(repeating: "0", count: 64))
        let (bad, _) = await runDownload(DownloadRequest(url: origin.url("/sum"), destination: .file(dir.file("bad")), checksum: wrong))
        #expect(bad.error?.code == .checksumMismatch)
        let (badMD5, _) = await runDownload(DownloadRequest(url: origin.url("/badmd5"), destination: .file(dir.file("badmd5"))))
        #expect(badMD5.error?.code == .contentMD5Mismatch)
        #expect(!FileManager.default.fileExists(atPath: dir.file("bad")) && !FileManager.default.fileExists(atPath: dir.file("badmd5")))
    }

    @Test func whatArrivedBeforeTheConnectionDroppedIsKeptAndTheRestIsAskedFor() async throws {
        let size: Int64 = 200_000
        let origin = try FaultOrigin()
        origin.serve("/cut", .resource(Resource(size: size, seed: 13, faults: [.closeAfter(bytes: 90_000, times: 1)])))
        let dir = try ScratchDirectory()
        let (result, _) = await runDownload(DownloadRequest(url: origin.url("/cut"), destination: .file(dir.file("cut"))))
        #expect(try result.get().bytes == size)
        #expect(fileMatchesPattern(dir.file("cut"), size: size, seed: 13))
        let requests = origin.requests("/cut")
        #expect(requests.count == 2)
        // The 90,000 bytes gathered before the close were written, not dropped: the retry asks for the rest.
        #expect(requests.last?.header("Range") == "bytes=90000-")
    }

    @Test func aGatheredBodyCutMidWayLeavesItsRecordOnThePartialAndTheNextRunResumes() async throws {
        let size: Int64 = 200_000
        let origin = try FaultOrigin()
        let resource = Resource(size: size, seed: 15, faults: [.closeAfter(bytes: 90_000, times: 1)])
        origin.serve("/cut", .resource(resource))
        let dir = try ScratchDirectory()
        let request = DownloadRequest(url: origin.url("/cut"), destination: .file(dir.file("cut")))
        let (first, _) = await runDownload(request, configuration: testConfiguration(retries: 0))
        #expect(throws: DownloadError.self) { try first.get() }
        // The record goes on the partial before the bytes that do not complete the body.
        #expect(dir.size("cut.dkpart") == 90_000)
        let record = try #require(ResumeInfo.stored(onPartial: dir.file("cut.dkpart")))
        #expect(record.entityTag == Resource.derivedETag(seed: 15, size: size))
        let (second, _) = await runDownload(request)
        #expect(try second.get().resumedFrom == 90_000)
        #expect(fileMatchesPattern(dir.file("cut"), size: size, seed: 15))
        #expect(origin.requests("/cut").last?.header("Range") == "bytes=90000-")
        #expect(origin.requests("/cut").last?.header("If-Range") == Resource.derivedETag(seed: 15, size: size))
    }

    @Test func aStalledBodyShowsProgressForWhatArrivedBeforeItEnds() async throws {
        let size: Int64 = 200_000
        let origin = try FaultOrigin()
        // The stall must outlast any pause of the client's own thread: a client held off the CPU for the
        // whole stall finds the rest of the body already in its socket, reads it with the first half in one
        // piece, and never sees a stall to report (a TSan CI run on 2 CPUs did, with a stall of 0.3 s).
        origin.serve("/stall", .resource(Resource(size: size, seed: 14, faults: [.stallAfter(bytes: 100_000, seconds: 1.5, times: 1)])))
        let dir = try ScratchDirectory()
        let (result, events) = await runDownload(DownloadRequest(url: origin.url("/stall"), destination: .file(dir.file("stall"))))
        #expect(try result.get().bytes == size)
        #expect(fileMatchesPattern(dir.file("stall"), size: size, seed: 14))
        // Bytes that waited longer than the progress interval were written and reported before the last ones.
        let partial = events.compactMap { event -> Int64? in
            if case .progress(let progress) = event, progress.bytesReceived > 0, progress.bytesReceived < size {
                return progress.bytesReceived
            }
            return nil
        }
        #expect(!partial.isEmpty, "no progress between the first and the last byte")
    }
}

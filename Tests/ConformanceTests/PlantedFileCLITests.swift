import DownloadKit
import Foundation
import Glibc
import Testing
import TestOrigin

/// Issue #44 end to end: another user (nobody, played with `setpriv`) plants a record or a link beside
/// where root's `downloadkit get` writes, in a sticky 1777 directory and in a root-owned group-writable
/// 0775 one (group `nogroup`), where the kernel never refuses to follow a link. The planted name costs at
/// most a refused or restarted download, never another file's bytes.
@Suite(.timeLimit(.minutes(3)))
struct PlantedFileCLITests {
    /// 1: `dl.bin.dkresume` planted by nobody, a genuine record whose `NSURLSessionResumeInfoLocalPath`
    /// names root's 0600 `secret.txt` beside it. The download starts over; the secret stays as it was.
    @Test(arguments: SharedDirectory.Kind.allCases)
    func aPlantedRecordDoesNotMoveRootsSecretIntoTheDownload(_ kind: SharedDirectory.Kind) async throws {
        let size: Int64 = 256 << 10
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/dl.bin", .resource(Resource(size: size, seed: 451)))
        let dir = try SharedDirectory(kind)
        let logs = try ScratchDirectory()
        let secret = try VictimFile(dir.file("secret.txt"), bytes: Array("root's secret, fifty-two bytes long, do not leak it!".utf8))
        let record = ResumeInfo(
            originalURL: origin.url("/dl.bin"), tempFilePath: secret.path, bytesReceived: 52,
            entityTag: Resource.derivedETag(seed: 451, size: size), totalLength: size, acceptsRanges: true)
        let staging = logs.file("record.plist")
        try record.write(to: staging)
        #expect(chmod(staging, 0o644) == 0 && chmod(logs.path, 0o755) == 0)
        try OtherUser.plantCopy(of: staging, at: dir.file("dl.bin.dkresume"))

        let result = try await CLITests().run(
            ["get", origin.url("/dl.bin"), "-o", dir.file("dl.bin"), "--progress", "none", "-vv"], in: logs)
        #expect(result.exitCode == 0, "\(result.output)")
        #expect(secret.damage == nil, "\(secret.damage ?? "")")
        #expect(!result.output.contains("resuming from byte 52"), "\(result.output)")
        #expect(result.output.contains("not resuming from the record"), "\(result.output)")
        #expect(fileMatchesPattern(dir.file("dl.bin"), size: size, seed: 451))
    }

    /// 2: `out.bin.dkjournal` planted by nobody as a link to a root file; `get --connections 4` is refused
    /// with an error naming the journal, and the root file keeps its bytes and mode.
    @Test(arguments: SharedDirectory.Kind.allCases)
    func aPlantedJournalLinkIsRefusedAndItsTargetUntouched(_ kind: SharedDirectory.Kind) async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/out.bin", .resource(Resource(size: 4 << 20, seed: 452)))
        let dir = try SharedDirectory(kind)
        let logs = try ScratchDirectory()
        let victim = try VictimFile(logs.file("victim"), bytes: Array(repeating: 0x42, count: 8192))
        try OtherUser.plantLink(at: dir.file("out.bin.dkjournal"), to: victim.path)

        let result = try await CLITests().run(
            ["get", origin.url("/out.bin"), "-o", dir.file("out.bin"), "--connections", "4", "--progress", "none"], in: logs)
        #expect(victim.damage == nil, "\(victim.damage ?? "")")
        #expect(result.exitCode != 0, "\(result.output)")
        #expect(result.output.contains(dir.file("out.bin.dkjournal")) && result.output.contains("symbolic link"), "\(result.output)")
        #expect(isSymbolicLink(dir.file("out.bin.dkjournal")))
    }

    /// `--log-file` naming a link nobody planted to a root file: refused before anything is appended.
    @Test(arguments: SharedDirectory.Kind.allCases)
    func aPlantedLogFileLinkIsRefusedAndItsTargetUntouched(_ kind: SharedDirectory.Kind) async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/l.bin", .resource(Resource(size: 64 << 10, seed: 453)))
        let dir = try SharedDirectory(kind)
        let logs = try ScratchDirectory()
        let victim = try VictimFile(logs.file("victim"), bytes: Array("root's own log\n".utf8))
        try OtherUser.plantLink(at: dir.file("dk.log"), to: victim.path)

        let result = try await CLITests().run(
            ["get", origin.url("/l.bin"), "-o", dir.file("l.bin"), "--log-file", dir.file("dk.log"), "--progress", "none"], in: logs)
        #expect(victim.damage == nil, "\(victim.damage ?? "")")
        #expect(result.exitCode != 0, "\(result.output)")
        #expect(result.output.contains(dir.file("dk.log")) && result.output.contains("symbolic link"), "\(result.output)")
    }
}

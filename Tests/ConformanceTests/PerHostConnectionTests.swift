import DownloadKit
import Foundation
import Testing
import TestOrigin

/// Issue #23: `--max-concurrent N` means N transfers at once, whatever the hosts; a per-host cap is
/// the user's to set and never silently cuts an explicit request.
@Suite(.timeLimit(.minutes(3)))
struct PerHostConnectionTests {
    /// 32 rate-limited files on one origin: long enough (about 1.5 s each) that all transfers overlap
    /// when nothing holds them back. The origin counts how many connections were open at once.
    private func origin(files: Int) throws -> FaultOrigin {
        let origin = try FaultOrigin()
        for index in 0..<files {
            origin.serve(
                "/f\(index).bin",
                .resource(Resource(size: 384 << 10, seed: UInt64(200 + index), bytesPerSecond: 256 << 10)))
        }
        return origin
    }

    private func urlList(_ origin: FaultOrigin, files: Int, in dir: ScratchDirectory) throws -> String {
        let list = dir.file("urls.txt")
        try (0..<files).map { origin.url("/f\($0).bin") }.joined(separator: "\n")
            .write(toFile: list, atomically: true, encoding: .utf8)
        return list
    }

    @Test func maxConcurrent32OpensThirtyTwoConnectionsToOneHost() async throws {
        let files = 32
        let origin = try origin(files: files)
        let dir = try ScratchDirectory()
        let out = try ScratchDirectory()
        let list = try urlList(origin, files: files, in: dir)
        let result = try await CLITests().run(
            ["get", "-i", list, "-d", out.path, "--max-concurrent", "32", "--progress", "none"], in: dir, timeout: 120)
        #expect(result.exitCode == 0, "\(result.output)")
        #expect(origin.peakConnectionCount == files)
        #expect(!result.output.contains("note: at most"))
        for index in 0..<files {
            #expect(fileMatchesPattern(out.file("f\(index).bin"), size: 384 << 10, seed: UInt64(200 + index)))
        }
    }

    @Test func anExplicitPerHostCapHoldsTransfersBackAndSaysSo() async throws {
        let files = 12
        let origin = try origin(files: files)
        let dir = try ScratchDirectory()
        let out = try ScratchDirectory()
        let list = try urlList(origin, files: files, in: dir)
        let result = try await CLITests().run(
            ["get", "-i", list, "-d", out.path, "--max-concurrent", "12", "--max-per-host", "4", "--progress", "none"],
            in: dir, timeout: 120)
        #expect(result.exitCode == 0, "\(result.output)")
        #expect(origin.peakConnectionCount == 4)
        #expect(result.output.contains("note: at most 4 connections to one host"))
        for index in 0..<files {
            #expect(fileMatchesPattern(out.file("f\(index).bin"), size: 384 << 10, seed: UInt64(200 + index)))
        }
    }

    @Test func theCapRule() {
        #expect(PerHostConnections.cap(maxConcurrent: 3, connectionsPerFile: 1, explicit: nil) == 8)
        #expect(PerHostConnections.cap(maxConcurrent: 32, connectionsPerFile: 1, explicit: nil) == 32)
        #expect(PerHostConnections.cap(maxConcurrent: 4, connectionsPerFile: 4, explicit: nil) == 16)
        #expect(PerHostConnections.cap(maxConcurrent: 32, connectionsPerFile: 1, explicit: 4) == 4)
        #expect(PerHostConnections.waitsForConnections(maxConcurrent: 32, connectionsPerFile: 1, cap: 4))
        #expect(!PerHostConnections.waitsForConnections(maxConcurrent: 8, connectionsPerFile: 1, cap: 8))
    }
}

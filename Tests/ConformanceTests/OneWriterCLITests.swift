import Foundation
import Glibc
import Testing
import TestOrigin

/// Issue #13: two `downloadkit get` processes on one destination; a SIGKILLed writer leaves no stale
/// lock; duplicate URLs in `-i` are downloaded once.
@Suite(.timeLimit(.minutes(3)))
struct OneWriterCLITests {
    @Test func aSecondProcessOnTheSameDestinationIsRefusedWithExit11() async throws {
        let executable = try #require(CLITests.executable)
        let origin = try FaultOrigin()
        let size: Int64 = 8 << 20
        // Slow enough (about 32 s) that the first writer is still at work however loaded the machine.
        origin.serve("/two", .resource(Resource(size: size, seed: 113, bytesPerSecond: 256 << 10)))
        let dir = try ScratchDirectory()
        let first = try ChildProcess(
            executable, ["get", origin.url("/two"), "-o", dir.file("two"), "--progress", "none"],
            outputPath: dir.path + "/../first-\(UUID().uuidString).log")
        defer { first.terminate(grace: 1) }
        for _ in 0..<1000 where (try? FileManager.default.attributesOfItem(atPath: dir.file("two.dkpart"))[.size] as? Int ?? 0) ?? 0 == 0 {
            try await Task.sleep(for: .milliseconds(10))
        }
        let second = try await CLITests().run(["get", origin.url("/two"), "-o", dir.file("two"), "--progress", "none"], in: dir)
        #expect(second.exitCode == 11, "\(second.output)")
        #expect(second.output.contains("error:"))
        #expect(second.output.contains("in use by another download (pid \(first.pid))"))

        // SIGKILL the writer: the kernel drops its lock, and a rerun continues from its bytes.
        first.send(SIGKILL)
        _ = try await offloaded { first.waitForExit(timeout: 10) }
        let have = try #require(dir.size("two.dkpart"))
        origin.serve("/two", .resource(Resource(size: size, seed: 113)))
        let rerun = try await CLITests().run(["get", origin.url("/two"), "-o", dir.file("two"), "--progress", "none"], in: dir)
        #expect(rerun.exitCode == 0, "\(rerun.output)")
        #expect(fileMatchesPattern(dir.file("two"), size: size, seed: 113))
        #expect(origin.requests("/two").last?.header("Range") == "bytes=\(have)-")
    }

    @Test func duplicateURLsInAListAreDownloadedOnce() async throws {
        let origin = try FaultOrigin()
        origin.serve("/dup.bin", .resource(Resource(size: 1 << 20, seed: 114)))
        let dir = try ScratchDirectory()
        let out = try ScratchDirectory()
        let list = dir.file("urls.txt")
        try [origin.url("/dup.bin"), origin.url("/dup.bin"), origin.url("/dup.bin")].joined(separator: "\n")
            .write(toFile: list, atomically: true, encoding: .utf8)
        let result = try await CLITests().run(["get", "-i", list, "-d", out.path, "--progress", "none"], in: dir)
        #expect(result.exitCode == 0, "\(result.output)")
        #expect(origin.requests("/dup.bin").count == 1)
        #expect(out.contents == ["dup.bin"])
        #expect(fileMatchesPattern(out.file("dup.bin"), size: 1 << 20, seed: 114))
    }
}

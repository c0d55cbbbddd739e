import DownloadKit
import Foundation
import Glibc
import Testing
import TestOrigin

/// One destination, one writer through the CLI (issue #13: behaviour, defects 5 and 6): a second
/// process is refused with exit 11 and an `error:` line, a kill -9 holder leaves no stale lock,
/// duplicate URLs are downloaded once, and `-d DIR` never overwrites or takes a reserved name.
@Suite(.timeLimit(.minutes(3)))
struct OneWriterCLITests {
    let cli = CLITests()

    @Test func twoProcessesOnOneDestinationAndAKilledHolderLeavesNoStaleLock() async throws {
        let size: Int64 = 64 << 20
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/w.bin", .resource(Resource(size: size, seed: 61, bytesPerSecond: 1 << 20)))
        let dir = try ScratchDirectory()
        let executable = try #require(CLITests.executable)
        let arguments = ["get", origin.url("/w.bin"), "-o", dir.file("w.bin"), "--progress", "none"]
        let holder = try ChildProcess(executable, arguments, outputPath: dir.path + "/../holder-\(UUID().uuidString).log")
        // Bounded wait until the holder has bytes on disk (it holds the lock from before its first byte).
        let partial = dir.file("w.bin.dkpart")
        let started = try await offloaded { () -> Bool in
            for _ in 0..<600 {
                if (try? FileManager.default.attributesOfItem(atPath: partial)[.size] as? Int64) ?? 0 > 0 { return true }
                usleep(50_000)
            }
            return false
        }
        #expect(started)

        let second = try await cli.run(arguments, in: dir)
        #expect(second.exitCode == 11, "\(second.output)")
        #expect(second.output.contains("error:"))
        #expect(second.output.contains("in use by another download"), "\(second.output)")
        #expect(dir.contents.contains("w.bin.dkpart"))

        kill(holder.pid, SIGKILL)
        _ = try await offloaded { holder.waitForExit(timeout: 10) }
        // The kernel dropped the dead holder's lock: a rerun resumes and finishes.
        origin.serve("/w.bin", .resource(Resource(size: size, seed: 61)))
        let rerun = try await cli.run(arguments, in: dir)
        #expect(rerun.exitCode == 0, "\(rerun.output)")
        #expect(fileMatchesPattern(dir.file("w.bin"), size: size, seed: 61))
        #expect(dir.contents == ["w.bin"])
    }

    @Test func duplicateURLsInAnInputFileAreDownloadedOnce() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/d.bin", .resource(Resource(size: 2 << 20, seed: 62)))
        let dir = try ScratchDirectory()
        let list = dir.path + "/../dup-\(UUID().uuidString).txt"
        defer { try? FileManager.default.removeItem(atPath: list) }
        try [origin.url("/d.bin"), origin.url("/d.bin"), origin.url("/d.bin")].joined(separator: "\n")
            .write(toFile: list, atomically: true, encoding: .utf8)
        let result = try await cli.run(["get", "-i", list, "-d", dir.path, "--progress", "none"], in: dir)
        #expect(result.exitCode == 0, "\(result.output)")
        #expect(dir.contents == ["d.bin"])
        #expect(fileMatchesPattern(dir.file("d.bin"), size: 2 << 20, seed: 62))
        #expect(origin.requests("/d.bin").count == 1)
    }

    @Test func directoryDownloadsKeepAnExistingFileAndTakeAFreeName() async throws {
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/n", .resource(Resource(size: 5000, seed: 63, contentDisposition: "attachment; filename=\"notes.txt\"")))
        origin.serve("/p", .resource(Resource(size: 5000, seed: 64, contentDisposition: "attachment; filename=\"x.dkpart\"")))
        let dir = try ScratchDirectory()
        try Data("keep me".utf8).write(to: URL(fileURLWithPath: dir.file("notes.txt")))
        let result = try await cli.run(["get", origin.url("/n"), origin.url("/p"), "-d", dir.path, "--progress", "none"], in: dir)
        #expect(result.exitCode == 0, "\(result.output)")
        #expect(dir.contents == ["notes (1).txt", "notes.txt", "x_dkpart"])
        #expect(FileManager.default.contents(atPath: dir.file("notes.txt")) == Data("keep me".utf8))
        #expect(fileMatchesPattern(dir.file("notes (1).txt"), size: 5000, seed: 63))
    }
}

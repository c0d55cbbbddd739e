import Foundation
import Testing
import TestOrigin

/// `-v`, `--log-file` and `-q` on `get` (issue #16: the CLI exposes the library's logging).
@Suite(.timeLimit(.minutes(2)))
struct CLILoggingTests {
    @Test func verboseLogsTheResumeOffsetAndRetriesToStderr() async throws {
        let origin = try FaultOrigin()
        let size: Int64 = 2 << 20
        origin.serve("/v.bin", .resource(Resource(size: size, seed: 91, faults: [.resetAfter(bytes: 1 << 20, times: 1)])))
        let dir = try ScratchDirectory()
        let result = try await CLITests().run(
            ["get", origin.url("/v.bin") + "?sig=topsecret", "-o", dir.file("v.bin"), "-v", "--progress", "none"], in: dir)
        #expect(result.exitCode == 0, "\(result.output)")
        #expect(result.output.contains("info starting"))
        #expect(result.output.contains("warning retrying in"))
        #expect(result.output.contains("info resuming from byte"))
        #expect(result.output.contains("download.id="))
        #expect(!result.output.contains("topsecret"))
        #expect(fileMatchesPattern(dir.file("v.bin"), size: size, seed: 91))
    }

    @Test func logFileGetsTheLinesAndStderrStaysClean() async throws {
        let origin = try FaultOrigin()
        origin.serve("/f.bin", .resource(Resource(size: 1 << 20, seed: 92)))
        let dir = try ScratchDirectory()
        let log = dir.file("dk.log")
        let result = try await CLITests().run(
            ["get", origin.url("/f.bin"), "-o", dir.file("f.bin"), "--log-file", log, "--progress", "none"], in: dir)
        #expect(result.exitCode == 0, "\(result.output)")
        #expect(!result.output.contains("starting"))
        let text = try String(contentsOfFile: log, encoding: .utf8)
        #expect(text.contains("info starting"))
        #expect(text.contains("info finished: 1048576 bytes"))
        let attributes = try FileManager.default.attributesOfItem(atPath: log)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
    }

    @Test func quietSilencesNotesButNotErrors() async throws {
        let origin = try FaultOrigin()
        origin.serve("/q0.bin", .resource(Resource(size: 64 << 10, seed: 93)))
        let dir = try ScratchDirectory()
        let list = dir.file("urls.txt")
        try [origin.url("/q0.bin"), origin.url("/missing")].joined(separator: "\n").write(toFile: list, atomically: true, encoding: .utf8)
        let result = try await CLITests().run(
            ["get", "-i", list, "-d", dir.path, "-q", "--max-concurrent", "4", "--max-per-host", "1"], in: dir)
        #expect(result.exitCode == 3, "\(result.output)")
        #expect(!result.output.contains("note:"))
        #expect(result.output.contains("error:"))
        let usage = try await CLITests().run(["get", origin.url("/q0.bin"), "-q", "-v"], in: dir)
        #expect(usage.exitCode == 64)
    }
}

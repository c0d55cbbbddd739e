import DownloadKit
import Foundation
import Testing
import TestOrigin

/// Issue #17, conditional downloads: `--no-clobber` keeps an existing file without a request;
/// `--if-modified` asks nginx with the validator recorded on the file and keeps it on a real 304,
/// downloads it again when it changed; a plain rerun says it replaces the file.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct ConditionalDownloadTests {
    let root: ScratchDirectory
    let nginx: NginxServer

    init() throws {
        root = try ScratchDirectory()
        try Data(TestPattern.bytes(offset: 0, count: 1 << 20, seed: 121)).write(to: URL(fileURLWithPath: root.file("c.bin")))
        nginx = try NginxServer(configuration: NginxConfiguration(documentRoot: root.path))
    }

    @Test func noClobberAndIfModifiedThroughTheCLI() async throws {
        defer { nginx.stop() }
        let dir = try ScratchDirectory()
        let url = nginx.httpURL("/c.bin")
        let target = dir.file("c.bin")
        let first = try await CLITests().run(["get", url, "-o", target, "--progress", "none"], in: dir)
        #expect(first.exitCode == 0, "\(first.output)")

        // --no-clobber: kept, not a single request.
        let before = try nginx.accessLog().count
        let kept = try await CLITests().run(["get", url, "-o", target, "--no-clobber", "--progress", "none"], in: dir)
        #expect(kept.exitCode == 0, "\(kept.output)")
        #expect(kept.output.contains("kept"))
        #expect(try nginx.accessLog().count == before)

        // --if-modified, unchanged: nginx answers 304 to the recorded validator; the file stays.
        let unchanged = try await CLITests().run(["get", url, "-o", target, "--if-modified", "--progress", "none"], in: dir)
        #expect(unchanged.exitCode == 0, "\(unchanged.output)")
        #expect(unchanged.output.contains("kept"))
        let log = try nginx.accessLog(waitingFor: before + 1)
        #expect(log.last?.status == 304)
        #expect(fileMatchesPattern(target, size: 1 << 20, seed: 121))

        // Changed on the server (new content, new mtime): downloaded again.
        try Data(TestPattern.bytes(offset: 0, count: 2 << 20, seed: 122)).write(to: URL(fileURLWithPath: root.file("c.bin")))
        let future = Date().addingTimeInterval(120)
        try FileManager.default.setAttributes([.modificationDate: future], ofItemAtPath: root.file("c.bin"))
        let changed = try await CLITests().run(["get", url, "-o", target, "--if-modified", "--progress", "none"], in: dir)
        #expect(changed.exitCode == 0, "\(changed.output)")
        #expect(!changed.output.contains("kept"))
        #expect(fileMatchesPattern(target, size: 2 << 20, seed: 122))

        // A plain rerun says it replaces the file.
        let again = try await CLITests().run(["get", url, "-o", target, "--progress", "none"], in: dir)
        #expect(again.exitCode == 0)
        #expect(again.output.contains("exists; downloading it again"))
        let usage = try await CLITests().run(["get", url, "-o", target, "--no-clobber", "--if-modified"], in: dir)
        #expect(usage.exitCode == 64)
    }
}

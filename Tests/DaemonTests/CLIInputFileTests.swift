import Foundation
import Testing
import TestOrigin

/// `downloadkit get -i FILE` with aria2's input-file format (issue #48): the TAB-separated URIs of a line are
/// the sources of one download. The real executable against two origins.
@Suite(.timeLimit(.minutes(3)))
struct CLIInputFileTests {
    static let size: Int64 = 4 << 20

    /// A line with two URIs of one file on two origins is one download that fetched ranges from both
    /// (before, the whole line was taken as one URL and the download failed); the next line, one URI, is
    /// another download.
    @Test func aLineOfTabSeparatedURIsIsOneDownloadFromEveryOrigin() async throws {
        let executable = try DaemonHarness.requireExecutable()
        let origins = try (0..<2).map { _ in try FaultOrigin() }
        defer { for origin in origins { origin.shutdown() } }
        for origin in origins {
            origin.serve("/f.bin", .resource(Resource(size: Self.size, seed: 41, bytesPerSecond: 1_500_000)))
        }
        origins[0].serve("/g.bin", .resource(Resource(size: 100_000, seed: 42)))
        let scratch = try ScratchDirectory()
        let list = scratch.file("list.txt")
        try """
            # two sources of f.bin, then g.bin
            \(origins[0].url("/f.bin"))\t\(origins[1].url("/f.bin"))

            \(origins[0].url("/g.bin"))
            """.write(toFile: list, atomically: true, encoding: .utf8)
        let run = try await offloaded {
            try ProcessRunner.run(
                executable, ["get", "-i", list, "-d", scratch.file("out"), "--connections", "4", "--progress", "none"],
                currentDirectory: scratch.path, timeout: 120)
        }
        #expect(run.succeeded, "\(run.output)")
        #expect(fileMatchesPattern(scratch.file("out/f.bin"), size: Self.size, seed: 41))
        #expect(fileMatchesPattern(scratch.file("out/g.bin"), size: 100_000, seed: 42))
        for (index, origin) in origins.enumerated() {
            let ranges = origin.requests("/f.bin").filter { $0.method == "GET" && $0.header("Range") != nil }
            #expect(!ranges.isEmpty, "origin \(index) served no range of f.bin: \(run.output)")
        }
    }

    /// An indented line (aria2's per-download option line) is refused naming the file and the line, and
    /// nothing is fetched.
    @Test func anOptionLineIsRefusedNamingItsLine() async throws {
        let executable = try DaemonHarness.requireExecutable()
        let origin = try FaultOrigin()
        defer { origin.shutdown() }
        origin.serve("/g.bin", .resource(Resource(size: 1000, seed: 43)))
        let scratch = try ScratchDirectory()
        let list = scratch.file("list.txt")
        try "\(origin.url("/g.bin"))\n  out=renamed.bin\n".write(toFile: list, atomically: true, encoding: .utf8)
        let run = try await offloaded {
            try ProcessRunner.run(
                executable, ["get", "-i", list, "-d", scratch.file("out"), "--progress", "none"],
                currentDirectory: scratch.path, timeout: 60)
        }
        #expect(run.status == 64, "\(run.output)")
        #expect(run.output.contains("-i \(list) line 2") && run.output.contains("'out=…'"), "\(run.output)")
        #expect(origin.requests("/g.bin").isEmpty)
    }
}

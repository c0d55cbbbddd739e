import DownloadKit
import Foundation
import Testing
import TestOrigin

/// Issue #47 item 2: `--if-modified` on a changed file makes ONE request — the conditional GET's 200 is
/// the new version and is written like any other (curl `-z`, wget `-N`, aria2c `--conditional-get`) —
/// and on an unchanged one the 304 leaves no working file behind. nginx's access log counts requests.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct ConditionalSingleRequestTests {
    @Test(arguments: [1, 4])
    func changedFileIsFetchedByTheConditionalRequestItself(connections: Int) async throws {
        let root = try ScratchDirectory()
        let served = root.file("c.bin")
        try Data(TestPattern.bytes(offset: 0, count: 1 << 20, seed: 131)).write(to: URL(fileURLWithPath: served))
        let nginx = try NginxServer(configuration: NginxConfiguration(documentRoot: root.path))
        defer { nginx.stop() }
        let dir = try ScratchDirectory()
        let url = nginx.httpURL("/c.bin")
        let target = dir.file("c.bin")
        let options = ["--progress", "none", "--connections", String(connections)]
        let first = try await CLITests().run(["get", url, "-o", target] + options, in: dir)
        #expect(first.exitCode == 0, "\(first.output)")

        // Unchanged: one request, a 304, the file kept and nothing left beside it.
        var before = try nginx.accessLog(waitingFor: 1).count
        let unchanged = try await CLITests().run(["get", url, "-o", target, "--if-modified"] + options, in: dir)
        #expect(unchanged.exitCode == 0, "\(unchanged.output)")
        #expect(unchanged.output.contains("kept"), "\(unchanged.output)")
        var log = Array(try nginx.accessLog(waitingFor: before + 1).dropFirst(before))
        #expect(log.map(\.status) == [304])
        #expect(dir.contents == ["c.bin"])

        // Changed: the conditional request's answer is the new version — exactly one request on one
        // connection, or the probe plus the segments' ranges (never an unconditional GET of the whole file).
        try Data(TestPattern.bytes(offset: 0, count: 2 << 20, seed: 132)).write(to: URL(fileURLWithPath: served))
        try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(120)], ofItemAtPath: served)
        before = try nginx.accessLog().count
        let changed = try await CLITests().run(["get", url, "-o", target, "--if-modified"] + options, in: dir)
        #expect(changed.exitCode == 0, "\(changed.output)")
        #expect(!changed.output.contains("kept"), "\(changed.output)")
        #expect(fileMatchesPattern(target, size: 2 << 20, seed: 132))
        try await Task.sleep(for: .milliseconds(200))
        log = Array(try nginx.accessLog().dropFirst(before))
        let described = log.map { "\($0.status) \($0.range ?? "-")" }
        if connections == 1 {
            #expect(log.map(\.status) == [200], "\(described)")
        } else {
            // The conditional probe (bytes=0-0) answered 206, then only range requests.
            #expect(log.first?.status == 206 && log.first?.range == "bytes=0-0", "\(described)")
            #expect(log.allSatisfy { $0.status == 206 }, "\(described)")
        }
        #expect(dir.contents == ["c.bin"])
    }
}

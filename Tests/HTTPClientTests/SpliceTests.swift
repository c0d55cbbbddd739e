import Foundation
import Glibc
import HTTPClient
import HTTPWire
import Testing
import TestOrigin
import TestThreads

/// `.spliceToFile`: Content-Length bodies on plain connections go socket → pipe → file without
/// passing through user space; other framings fall back to the body callback.
@Suite(.offPool) struct SpliceTests {
    /// Runs one exchange that writes the body into `path` starting at `start`, the way the engine does.
    func fetch(_ url: String, into path: String, start: Int64 = 0) throws -> (streamed: Int, spliced: Int, summary: ExchangeSummary) {
        let fd = open(path, O_RDWR | O_CREAT, 0o644)
        try #require(fd >= 0)
        defer { close(fd) }
        let client = try DKHTTPClient()
        var position = start
        var streamed = 0
        var spliced = 0
        let summary = try client.execute(
            DKHTTPRequest(url: try HTTPURL(url)),
            onHead: { _ in .spliceToFile(fileDescriptor: fd, offset: start) },
            onBody: { bytes in
                let n = pwrite(fd, bytes.baseAddress, bytes.count, off_t(position))
                #expect(n == bytes.count)
                position += Int64(bytes.count)
                streamed += bytes.count
            },
            onSpliced: { count in
                position += Int64(count)
                spliced += count
            })
        return (streamed, spliced, summary)
    }

    @Test func contentLengthBodiesAreSplicedIntoTheFileAtTheirOffset() throws {
        let origin = try FaultOrigin()
        let size = 6 << 20
        origin.serve("/s", .resource(Resource(size: Int64(size), seed: 91)))
        let dir = try ScratchDirectory()
        let path = dir.file("s")
        let head = [UInt8](repeating: 0xAB, count: 100)
        try Data(head).write(to: URL(fileURLWithPath: path))
        let result = try fetch(origin.url("/s"), into: path, start: 100)
        #expect(result.spliced > 0, "the body went through splice")
        #expect(result.streamed + result.spliced == size)
        #expect(result.summary.bodyBytes == Int64(size))
        #expect(result.summary.connectionKeptAlive)
        let data = try #require(FileManager.default.contents(atPath: path))
        #expect(data.count == size + 100)
        #expect(Array(data.prefix(100)) == head, "bytes before the offset are untouched")
        #expect(data.dropFirst(100).withUnsafeBytes { TestPattern.firstMismatch(in: $0, offset: 0, seed: 91) } == nil)
    }

    /// Until the head is complete a read takes at most 4 KiB, so few of a spliced body's bytes pass through
    /// the buffer and the rest of it is never touched (memory at 1,024 transfers, issue #23). The origin
    /// sends head and body in one write, so a larger first read would have taken tens of KiB of body
    /// (one loopback segment); a head larger than one such read still arrives whole.
    @Test(arguments: [0, 30_000])
    func theHeadIsReadInSmallReadsAndTheBodyStillSplices(paddedHead: Int) throws {
        let origin = try FaultOrigin()
        let size = 1 << 20
        origin.serve(
            "/h",
            .script { _, connection in
                var head = "HTTP/1.1 200 OK\r\nContent-Length: \(size)\r\n"
                if paddedHead > 0 { head += "X-Padding: \(String(repeating: "a", count: paddedHead))\r\n" }
                head += "\r\n"
                try connection.write(Array(head.utf8) + TestPattern.bytes(offset: 0, count: size, seed: 93))
            })
        let dir = try ScratchDirectory()
        let path = dir.file("h")
        let result = try fetch(origin.url("/h"), into: path)
        #expect(result.streamed < 4096, "the first read took at most 4 KiB, head included")
        #expect(result.spliced > 0)
        #expect(result.streamed + result.spliced == size)
        let data = try #require(FileManager.default.contents(atPath: path))
        #expect(data.count == size)
        #expect(data.withUnsafeBytes { TestPattern.firstMismatch(in: $0, offset: 0, seed: 93) } == nil)
    }

    @Test func chunkedBodiesFallBackToTheBodyCallback() throws {
        let origin = try FaultOrigin()
        origin.serve("/c", .resource(Resource(size: 300_000, seed: 92, chunked: true)))
        let dir = try ScratchDirectory()
        let result = try fetch(origin.url("/c"), into: dir.file("c"))
        #expect(result.spliced == 0)
        #expect(result.streamed == 300_000)
        #expect(fileMatchesPattern(dir.file("c"), size: 300_000, seed: 92))
    }

    @Test func aBodyCutShortWhileSplicingIsATruncationError() throws {
        let origin = try FaultOrigin()
        origin.serve("/t", .resource(Resource(size: 4 << 20, seed: 93, faults: [.closeAfter(bytes: 2 << 20, times: 1)])))
        let dir = try ScratchDirectory()
        #expect(throws: WireError.self) { _ = try fetch(origin.url("/t"), into: dir.file("t")) }
        // Everything received before the cut is in the file at its place.
        let data = try #require(FileManager.default.contents(atPath: dir.file("t")))
        #expect(data.count == 2 << 20)
        #expect(data.withUnsafeBytes { TestPattern.firstMismatch(in: $0, offset: 0, seed: 93) } == nil)
    }
}

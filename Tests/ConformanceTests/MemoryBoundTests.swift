import Foundation
import HTTPClient
import HTTPWire
import Testing
import TestOrigin

/// Issue #8, resource bounds: no buffer grows with what the network sends. A server streams a
/// 10 GiB body; the client's memory stays flat.
@Suite(.timeLimit(.minutes(3)))
struct MemoryBoundTests {
    /// Expected: the whole 10 GiB arrives through the reused receive buffer, and between 512 MiB and
    /// 10 GiB received the process's RSS grows by far less than what was received. Allowed: 512 MiB,
    /// because other suites run in this process at the same time (their buffers, thread stacks and
    /// malloc arenas once moved it by 186 MiB in a whole-suite run, 2026-11-27); a client that buffered
    /// the body would grow by gigabytes.
    @Test func tenGiBStreamWithFlatMemory() async throws {
        let total: Int64 = 10 << 30
        let origin = try FaultOrigin()
        origin.serve("/ten", .script { _, connection in
            try connection.write("HTTP/1.1 200 OK\r\nContent-Length: \(total)\r\nConnection: close\r\n\r\n")
            // One reused 1 MiB buffer: the origin must not be the bottleneck or the memory user.
            let chunk = [UInt8](repeating: 0x5A, count: 1 << 20)
            for _ in 0..<(total >> 20) { try connection.write(chunk) }
        })
        let url = try HTTPURL(origin.url("/ten"))
        let measured = try await offloaded { () throws -> (received: Int64, before: Int64, after: Int64) in
            let client = try DKHTTPClient()
            var received: Int64 = 0
            var before: Int64 = 0
            _ = try client.execute(
                DKHTTPRequest(url: url),
                onHead: { _ in .stream },
                onBody: { bytes in
                    let previous = received
                    received += Int64(bytes.count)
                    if previous < 512 << 20 && received >= 512 << 20 { before = residentMemoryBytes() }
                })
            return (received, before, residentMemoryBytes())
        }
        #expect(measured.received == total)
        #expect(measured.before > 0 && measured.after > 0)
        #expect(
            measured.after - measured.before < 512 << 20,
            "RSS grew by \((measured.after - measured.before) >> 20) MiB while 9.5 GiB streamed")
    }
}

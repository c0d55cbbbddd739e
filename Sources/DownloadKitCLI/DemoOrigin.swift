import DownloadKitRuntime
import Foundation
import Glibc

/// The `demo` command's own loopback origin: one generated file, `GET` with an optional
/// `Range: bytes=N-`, an optional rate limit, and a log of the `Range` headers it saw.
///
/// Deliberately tiny and separate from the test harness (`TestOrigin`, which the shipped binary must
/// not contain — issue #12's product graph; `Scripts/test.sh` checks the binary's symbols). It serves
/// one client at a time on 127.0.0.1 and closes each connection after one response: all `demo` needs.
final class DemoOrigin: @unchecked Sendable {
    /// The served file's URL.
    let url: String
    private let listener: Int32
    private let size: Int64
    private let seed: UInt64
    private let bytesPerSecond: Int
    /// The `Range` headers seen and whether ``shutdown()`` was called.
    private let state = LockedValue((ranges: [String](), stopped: false))
    private let thread: Thread

    /// Listens on an ephemeral 127.0.0.1 port and serves `/demo.bin` in the background.
    init(size: Int64, seed: UInt64, bytesPerSecond: Int) throws {
        self.size = size
        self.seed = seed
        self.bytesPerSecond = bytesPerSecond
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw DemoOriginError.socket(errno) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 8) == 0 else {
            let code = errno
            close(fd)
            throw DemoOriginError.socket(code)
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        listener = fd
        url = "http://127.0.0.1:\(UInt16(bigEndian: address.sin_port))/demo.bin"
        let box = WeakBox()
        thread = Thread { box.origin?.acceptLoop() }
        box.origin = self
        thread.name = "dk-demo-origin"
        thread.start()
    }

    /// The `Range` header values of the requests served so far.
    var rangesSeen: [String] { state.withLock { $0.ranges } }

    /// Stops accepting; a transfer in progress ends at its next write.
    func shutdown() {
        state.withLock { $0.stopped = true }
        Glibc.shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private final class WeakBox: @unchecked Sendable { weak var origin: DemoOrigin? }

    private var isStopped: Bool { state.withLock { $0.stopped } }

    private func acceptLoop() {
        while !isStopped {
            let client = retryingInterrupts { accept(listener, nil, nil) }.result
            if client < 0 { return }
            serve(client)
            close(client)
        }
    }

    private func serve(_ client: Int32) {
        guard let head = readHead(client) else { return }
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
        guard let requestLine = lines.first, requestLine.hasPrefix("GET /demo.bin ") else {
            send(client, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        }
        var start: Int64 = 0
        for line in lines.dropFirst() {
            let parts = line.split(separator: ":", maxSplits: 1)
            guard parts.count == 2, parts[0].lowercased() == "range" else { continue }
            let value = parts[1].trimmingCharacters(in: .whitespaces)
            state.withLock { $0.ranges.append(value) }
            if value.hasPrefix("bytes="), value.hasSuffix("-"), let from = Int64(value.dropFirst(6).dropLast()),
                from >= 0, from < size
            {
                start = from
            }
        }
        let validator = "\"demo-\(seed)-\(size)\""
        let headers =
            start > 0
            ? "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes \(start)-\(size - 1)/\(size)\r\n"
            : "HTTP/1.1 200 OK\r\n"
        guard
            send(
                client,
                headers + "Content-Length: \(size - start)\r\nETag: \(validator)\r\nAccept-Ranges: bytes\r\n"
                    + "Connection: close\r\n\r\n")
        else { return }
        let chunkSize = 64 << 10
        let chunk = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkSize, alignment: 64)
        defer { chunk.deallocate() }
        var offset = start
        let began = DispatchTime.now().uptimeNanoseconds
        while offset < size, !isStopped {
            let count = Int(min(Int64(chunkSize), size - offset))
            let slice = UnsafeMutableRawBufferPointer(rebasing: chunk[0..<count])
            DemoPattern.fill(slice, offset: offset)
            var sent = 0
            while sent < count {
                let n = retryingInterrupts { Glibc.send(client, slice.baseAddress! + sent, count - sent, Int32(MSG_NOSIGNAL)) }.result
                guard n > 0 else { return }
                sent += n
            }
            offset += Int64(count)
            if bytesPerSecond > 0 {
                // Pace to the configured rate: sleep until the bytes sent so far are due.
                let due = UInt64(Double(offset - start) / Double(bytesPerSecond) * 1e9)
                let elapsed = DispatchTime.now().uptimeNanoseconds - began
                if due > elapsed { usleep(useconds_t(min((due - elapsed) / 1000, 1_000_000))) }
            }
        }
    }

    private func readHead(_ client: Int32) -> String? {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while bytes.count < 16 << 10 {
            let n = retryingInterrupts { buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) } }.result
            guard n > 0 else { return nil }
            bytes.append(contentsOf: buffer[0..<n])
            if let end = bytes.firstRange(of: [13, 10, 13, 10]) {
                return String(decoding: bytes[..<end.lowerBound], as: UTF8.self)
            }
        }
        return nil
    }

    @discardableResult
    private func send(_ client: Int32, _ text: String) -> Bool {
        let bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            let n = retryingInterrupts {
                bytes[sent...].withUnsafeBytes { Glibc.send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            }.result
            guard n > 0 else { return false }
            sent += n
        }
        return true
    }
}

/// Why the demo origin could not start.
enum DemoOriginError: Error, CustomStringConvertible {
    case socket(Int32)

    var description: String {
        switch self {
        case .socket(let code): "the demo origin could not listen on 127.0.0.1: \(String(cString: strerror(code)))"
        }
    }
}

/// The demo file's bytes: a SplitMix64 stream keyed by the 8-byte word index, so any range can be
/// generated on its own and the expected SHA-256 computed independently of the download.
enum DemoPattern {
    static let seed: UInt64 = 2026

    static func fill(_ buffer: UnsafeMutableRawBufferPointer, offset: Int64) {
        var index = 0
        while index < buffer.count {
            let absolute = UInt64(offset) + UInt64(index)
            var z = (absolute >> 3) &* 0x9E37_79B9_7F4A_7C15 &+ seed
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            z ^= z >> 31
            // The rest of this 8-byte word, then the next word.
            var lane = Int(absolute & 7)
            while lane < 8, index < buffer.count {
                buffer[index] = UInt8(truncatingIfNeeded: z >> (UInt64(lane) * 8))
                lane += 1
                index += 1
            }
        }
    }
}

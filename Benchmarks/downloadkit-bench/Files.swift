import Foundation
import Glibc
import TestOrigin

private func errnoText() -> String { String(cString: strerror(errno)) }

/// Checks that `path` has exactly `bytes` bytes and matches the pattern at 64 offsets spread over the
/// file (first and last byte included) plus a 4 KiB run in the middle. Returns the problem, or nil.
func spotCheck(path: String, bytes: Int64, seed: UInt64) -> String? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return "open \(path): \(errnoText())" }
    defer { close(fd) }
    var status = stat()
    guard fstat(fd, &status) == 0 else { return "fstat: \(errnoText())" }
    guard Int64(status.st_size) == bytes else { return "size \(status.st_size), expected \(bytes)" }
    guard bytes > 0 else { return nil }
    var offsets = (0..<64).map { Int64($0) * (bytes - 1) / 63 }
    let middle = bytes / 2
    var probe = [UInt8](repeating: 0, count: 4096)
    let window = Int(min(Int64(probe.count), bytes - middle))
    let read = probe.withUnsafeMutableBytes { pread(fd, $0.baseAddress, window, off_t(middle)) }
    guard read == window else { return "pread at \(middle): \(read < 0 ? errnoText() : "short read")" }
    if let mismatch = probe.withUnsafeBytes({
        TestPattern.firstMismatch(in: UnsafeRawBufferPointer(rebasing: $0[0..<window]), offset: middle, seed: seed)
    }) {
        return "byte at offset \(middle + Int64(mismatch)) differs from the pattern"
    }
    offsets.sort()
    for offset in offsets {
        var byte: UInt8 = 0
        guard pread(fd, &byte, 1, off_t(offset)) == 1 else { return "pread at \(offset): \(errnoText())" }
        guard byte == TestPattern.byte(at: offset, seed: seed) else {
            return "byte at offset \(offset) differs from the pattern"
        }
    }
    return nil
}

/// Writes `bytes` bytes of the pattern to `path` (via a temporary name, renamed when complete).
func writePatternFile(path: String, bytes: Int64, seed: UInt64) throws {
    let temporary = path + ".tmp"
    let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
    guard fd >= 0 else { throw BenchError("open \(temporary): \(errnoText())") }
    defer { close(fd) }
    let chunk = 8 << 20
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 64)
    defer { buffer.deallocate() }
    var offset: Int64 = 0
    while offset < bytes {
        let count = Int(min(Int64(chunk), bytes - offset))
        let window = UnsafeMutableRawBufferPointer(rebasing: buffer[0..<count])
        guard let base = window.baseAddress else { break }
        TestPattern.fill(window, offset: offset, seed: seed)
        var written = 0
        while written < count {
            let result = pwrite(fd, base + written, count - written, off_t(offset) + off_t(written))
            if result < 0 {
                if errno == EINTR { continue }
                throw BenchError("write \(temporary): \(errnoText())")
            }
            written += result
        }
        offset += Int64(count)
    }
    guard rename(temporary, path) == 0 else { throw BenchError("rename \(temporary): \(errnoText())") }
}

/// Reads the file so the origin serves it from the page cache. Called before every measured run, not
/// once per bench: on the project's VM free memory goes back to the host (virtio-balloon, DAMON reclaim),
/// and a 1 GiB file warmed at the start had lost scattered pages minutes later. nginx's single worker
/// then blocks on each disk read with every connection waiting behind it: 16 capped connections measured
/// 88–92 % of N × cap with 2–6 MB of the file evicted and 95–98 % with all of it cached (2026-11-26).
func warmPageCache(path: String) throws {
    try warmPageCache(paths: [path])
}

/// ``warmPageCache(path:)`` for each of `paths`, with one read buffer.
func warmPageCache(paths: [String]) throws {
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 8 << 20, alignment: 64)
    defer { buffer.deallocate() }
    for path in paths {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw BenchError("open \(path): \(errnoText())") }
        defer { close(fd) }
        while true {
            let count = read(fd, buffer.baseAddress, buffer.count)
            if count < 0 && errno == EINTR { continue }
            if count < 0 { throw BenchError("read \(path): \(errnoText())") }
            if count == 0 { break }
        }
    }
}

/// Reads a client's executable and the shared libraries it loads (as `ldd` lists them) into the page
/// cache before a measured run, for every client alike. This VM evicts file pages within seconds of
/// their last use, and a run that finds its program evicted pays for reading it back from the disk:
/// `downloadkit-bench fetch --mode many` (1,000 × 64 KiB, about 0.3 s) took 0.08–0.16 s longer with its
/// binary and the Swift libraries dropped from the page cache (`posix_fadvise(DONTNEED)`, 3 pairs by
/// hand, 2026-11-28), and the small-files scenario's first DownloadKit run was its slowest in three
/// bench runs in a row. A larger program loses more, which is a start-up cost, not the per-file
/// throughput these rows compare. A program `ldd` cannot read (a script) is warmed alone. `measure`
/// calls this for every run; the file scenarios call it before ``settlePageCache(directory:bytes:)`` as
/// well, so that reading a program the VM evicted (about 115 MiB for DownloadKit's, 18 MiB for curl's)
/// does not take pages the settle had just freed for the run.
func warmExecutable(_ path: String) throws {
    let files = try LoadedFiles.shared.files(of: path)
    try warmPageCache(paths: files)
}

/// The files a program maps when it starts, found once per program.
private final class LoadedFiles: @unchecked Sendable {
    static let shared = LoadedFiles()
    private let lock = NSLock()
    private var known: [String: [String]] = [:]

    func files(of executable: String) throws -> [String] {
        lock.lock()
        defer { lock.unlock() }
        if let files = known[executable] { return files }
        let result = try ProcessRunner.run("ldd", [executable])
        // Lines are "name => /path (0x…)", "/path (0x…)" or "linux-vdso.so.1 (0x…)"; keep the paths.
        var files = [executable]
        if result.succeeded {
            for line in result.output.split(whereSeparator: \.isNewline) {
                for word in line.split(separator: " ") where word.hasPrefix("/") {
                    files.append(String(word))
                }
            }
        }
        known[executable] = files
        return files
    }
}

/// Writes a scratch file in `directory`, `bytes` (the coming run's download) plus a sixteenth of zeros,
/// and deletes it, so the run that follows finds that much page cache just freed by the guest instead
/// of pages it gave back to the host.
///
/// On this VM a page the guest has returned (free page reporting, reclaim) is slow to touch again:
/// `dd` of 1 GiB into ext4 took 3.43 s of system time, and 0.32 s right after deleting its file. Each
/// client's run deletes its download afterwards, so without this a run's cost depended on how much the
/// run before it had freed: in the `segmented` scenario DownloadKit ×16 followed axel ×8 (512 MiB
/// freed) and axel ×16 followed aria2c ×16 (1 GiB). With a scratch file before each run, by hand,
/// DownloadKit ×16 and axel ×16 measured alike (76.5–85.2 % against 78.2–84.2 % of 16 × cap;
/// docs/BENCHMARKS.md, "16 connections into ext4"). The file is deleted dirty: nothing reaches the disk.
func settlePageCache(directory: String, bytes: Int64) throws {
    let path = directory + "/.settle-page-cache"
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw BenchError("open \(path): \(errnoText())") }
    defer { unlink(path) }
    defer { close(fd) }
    let chunk = 8 << 20
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunk, alignment: 64)
    defer { buffer.deallocate() }
    buffer.initializeMemory(as: UInt8.self, repeating: 0)
    var left = bytes + bytes / 16
    while left > 0 {
        let count = write(fd, buffer.baseAddress, Int(min(Int64(chunk), left)))
        if count < 0 && errno == EINTR { continue }
        if count < 0 { throw BenchError("write \(path): \(errnoText())") }
        if count == 0 { throw BenchError("write \(path): no progress") }
        left -= Int64(count)
    }
}

/// Flushes dirty data to disk (`sync(2)`; Glibc's module does not export `syncfs`), so one client's
/// write-back does not land in the next client's measurement.
func syncFileSystem() {
    sync()
}

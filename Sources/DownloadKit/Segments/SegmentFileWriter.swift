import Glibc
import HTTPClient
import HTTPWire

/// The file as the segment workers write it: `pwrite` at each worker's own offsets (POSIX positional
/// I/O does not use the shared file offset), one worker at a time. The handle outlives every worker
/// (the coordinator joins them).
///
/// Why one at a time: the kernel serializes buffered writes to one file anyway (ext4, tmpfs and XFS
/// take the inode's lock exclusively for the whole copy), but its waiters spin on a running owner
/// before they sleep: with many connections on few CPUs that spinning (`rwsem_spin_on_owner`) costs a
/// good share of the process's time and slows the owner's copy too; waiting on this user-space mutex
/// sleeps at once, for the same wall time (docs/BENCHMARKS.md, "Segment writes, one at a time").
///
/// With ``DownloadConfiguration/directWrites`` (the default) the whole blocks of each write go
/// past the page cache through a second descriptor (``DirectFile``, cut by ``DirectWriteSplit``); the
/// rest, and everything on a file system outside ``DirectFile/fileSystems`` or one that refuses
/// `O_DIRECT`, goes through the page cache.
/// Either way a write returns only once its bytes are in the file, so the workers' claim, write, credit
/// order is unchanged.
///
/// The lock holds the files themselves, not `Void`: ThreadSanitizer attributed the access to a zero-sized
/// locked value to the lock object's first bytes and reported a race with a thread about to lock it.
struct SegmentFileWriter: Sendable {
    private struct Files {
        let handle: FileHandleFD
        var direct: DirectFile?
        var directBytes: Int64 = 0
    }

    private let files: LockedValue<Files>

    /// - Parameters:
    ///   - handle: The temp file, open for writing.
    ///   - direct: Whether to write whole blocks with `O_DIRECT` where the file system allows it.
    init(_ handle: FileHandleFD, direct: Bool) {
        files = LockedValue(Files(handle: handle, direct: direct ? DirectFile(sameFileAs: handle) : nil))
    }

    /// Whether whole blocks go past the page cache (false on other file systems, or after a refusal).
    var writesDirect: Bool { files.withLock { $0.direct != nil } }

    /// The bytes written past the page cache so far.
    var directBytes: Int64 { files.withLock { $0.directBytes } }

    /// Writes `bytes` at `offset` (all of them, or throws with `written` set to the prefix that reached
    /// the file), while no other worker writes.
    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64, written: inout Int) throws(FileSystemError) {
        written = 0
        try files.withLock { (files: inout Files) throws(FileSystemError) in
            guard let direct = files.direct else {
                return try files.handle.write(bytes, toAbsoluteOffset: offset, written: &written)
            }
            let split = DirectWriteSplit(
                offset: offset, count: bytes.count, alignment: DirectFile.alignment, minimumDirect: DirectFile.minimumWrite)
            try Self.buffered(bytes, 0..<split.head, at: offset, through: files.handle, written: &written)
            if split.direct > 0 {
                var part = 0
                defer {
                    written += part
                    files.directBytes += Int64(part)
                }
                let piece = UnsafeRawBufferPointer(rebasing: bytes[split.head..<(split.head + split.direct)])
                if try direct.write(piece, at: offset + Int64(split.head), written: &part) == .refused { files.direct = nil }
            }
            // The tail, and whatever of the middle a short or refused direct write left.
            try Self.buffered(bytes, written..<bytes.count, at: offset, through: files.handle, written: &written)
        }
    }

    /// Reads `count` bytes at `offset` (bytes already credited: a mirror's sample is compared with them).
    func read(count: Int, at offset: Int64) throws(FileSystemError) -> [UInt8] {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, count), alignment: 64)
        defer { buffer.deallocate() }
        let done = try files.withLock { (files: inout Files) throws(FileSystemError) -> Int in
            var done = 0
            while done < count {
                let n = try files.handle.read(
                    into: UnsafeMutableRawBufferPointer(rebasing: buffer[done..<count]), fromAbsoluteOffset: offset + Int64(done))
                if n == 0 { break }
                done += n
            }
            return done
        }
        return Array(UnsafeRawBufferPointer(rebasing: buffer[0..<done]))
    }

    /// Writes `range` of `bytes` through the page cache, adding what reached the file to `written`.
    private static func buffered(
        _ bytes: UnsafeRawBufferPointer, _ range: Range<Int>, at offset: Int64, through handle: FileHandleFD, written: inout Int
    ) throws(FileSystemError) {
        guard !range.isEmpty else { return }
        var part = 0
        defer { written += part }
        try handle.write(
            UnsafeRawBufferPointer(rebasing: bytes[range]), toAbsoluteOffset: offset + Int64(range.lowerBound), written: &part)
    }
}

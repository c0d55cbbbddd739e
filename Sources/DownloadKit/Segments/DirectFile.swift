import CDownloadKitSystem
import Glibc

/// How one segment write is cut when the file is also open with `O_DIRECT`: the whole aligned blocks
/// in its middle go past the page cache; the partial blocks at either end go through it, and so does a
/// write whose middle is shorter than `minimumDirect` (a direct write waits for the device, which only
/// pays when it carries enough). A value, so the cut is tested on its own.
///
/// A block is thus written direct only when one write covers all of it. Bytes of a block split between
/// two writes (a segment's end inside it, or a response's pieces) always go through the page cache, so no
/// block is written both ways in one run; where an earlier run left a block in the page cache, the
/// kernel writes it back and drops it before a direct write to that range.
struct DirectWriteSplit {
    /// The bytes at the start of the write that go through the page cache.
    var head: Int
    /// The bytes after `head` that go direct: whole blocks, at an aligned offset (0 when none).
    var direct: Int

    /// The bytes at the end that go through the page cache.
    func tail(of count: Int) -> Int { count - head - direct }

    init(offset: Int64, count: Int, alignment: Int, minimumDirect: Int) {
        let block = Int64(alignment)
        let first = (offset + block - 1) / block * block
        let end = (offset + Int64(count)) / block * block
        if end - first >= Int64(max(minimumDirect, alignment)) {
            head = Int(first - offset)
            direct = Int(end - first)
        } else {
            head = count
            direct = 0
        }
    }
}

/// A download's temp file opened a second time, with `O_DIRECT`, and the aligned buffer its writes are
/// made from. Segment workers write through it (``SegmentFileWriter``, under its lock) so that a
/// segmented download does not copy every byte into page-cache pages: on a virtual machine a page the
/// guest gave back to the host is costly to touch again, and one writer copying into such pages holds
/// back every connection waiting behind it (docs/BENCHMARKS.md, "16 connections, past the page cache").
///
/// Durability is unchanged: a direct write has reached the device (perhaps its volatile cache) when it
/// returns, and the checkpoint's `fdatasync` of the inode flushes that cache and the extent changes as
/// it did for buffered pages.
///
/// The partial's one-writer lock (`PartialFileLock`) is a `flock`, which belongs to the engine's open file
/// description: opening and closing this second one leaves it held. A POSIX `fcntl` lock would not be:
/// closing any descriptor of a file releases those, so such a lock would need this one kept open as long.
final class DirectFile {
    /// Offsets, lengths and the buffer's address are multiples of this. 4 KiB covers devices with 512-byte
    /// and 4 KiB logical blocks; a file system that asks for more refuses the first write (`EINVAL`) and the
    /// download goes on through the page cache.
    static let alignment = 4096
    /// The smallest direct write; a smaller middle goes through the page cache.
    static let minimumWrite = 64 << 10
    /// The most one direct write carries (the bounce buffer's size).
    static let bufferCapacity = 1 << 20

    /// How a direct write ended.
    enum Outcome: Equatable {
        /// All of it reached the file.
        case written
        /// The file system took fewer bytes than asked: the rest goes through the page cache.
        case short
        /// The file system refused `O_DIRECT` for this file (`EINVAL`), or the aligned buffer could not be
        /// allocated. Nothing past `written` reached the file; the rest of this write and of the download
        /// goes through the page cache.
        case refused
    }

    let fd: Int32
    let path: String
    /// The partial's hooks (its handle's): the write fence is checked before each write.
    let hooks: FileIOHooks
    private var buffer: UnsafeMutableRawPointer?

    /// The file systems whose files are written direct: ext4 and XFS, local block-device file systems for
    /// which `O_DIRECT` is the documented fast path. Elsewhere a direct write can be slower than the page
    /// cache (NFS sends each one to the server and waits; tmpfs copies anyway) or take another path (btrfs
    /// falls back to buffered I/O for compressed files), so those keep the page cache.
    static let fileSystems: Set<Int> = [0xEF53, 0x5846_5342]

    /// Opens `handle`'s file for direct writes, or nil where that is not done: a file system outside
    /// ``fileSystems``, one that refuses `O_DIRECT`, no `/proc`. The caller then writes through the page
    /// cache only.
    init?(sameFileAs handle: FileHandleFD) {
        guard Self.fileSystems.contains(dk_file_system_type(handle.fd)) else { return nil }
        let fd = dk_reopen_direct(handle.fd)
        guard fd >= 0 else { return nil }
        self.fd = fd
        self.path = handle.path
        hooks = handle.hooks
    }

    deinit {
        close(fd)
        free(buffer)
    }

    /// Writes `bytes` (whole blocks) at the aligned `offset`: straight from `bytes` when they are at an
    /// aligned address (``SmallBodyGather``'s buffer), else copied through the aligned buffer.
    /// - Parameter written: Set to the bytes that reached the file, also when this throws.
    /// - Throws: ``FileSystemError`` for a failure other than the file system's refusal (a full disk, an
    ///   I/O error, a lost lease).
    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64, written: inout Int) throws(FileSystemError) -> Outcome {
        written = 0
        guard let base = bytes.baseAddress else { return .written }
        try hooks.check("pwrite", path)
        var bounce: UnsafeMutableRawPointer?
        if Int(bitPattern: base) % Self.alignment != 0 {
            guard let buffer = alignedBuffer() else { return .refused }
            bounce = buffer
        }
        while written < bytes.count {
            let count = min(bytes.count - written, Self.bufferCapacity)
            var source = base + written
            if let bounce {
                bounce.copyMemory(from: source, byteCount: count)
                source = UnsafeRawPointer(bounce)
            }
            let n = pwrite(fd, source, count, off_t(offset) + off_t(written))
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EINVAL { return .refused }
                throw FileSystemError("pwrite (O_DIRECT)", path: path, errorNumber: .current)
            }
            if n == 0 { throw FileSystemError("pwrite (O_DIRECT)", path: path, errorNumber: .ioError) }
            written += n
            if n < count { return .short }
        }
        return .written
    }

    /// The aligned buffer, allocated at the first direct write (nil if memory is short).
    private func alignedBuffer() -> UnsafeMutableRawPointer? {
        if let buffer { return buffer }
        var allocated: UnsafeMutableRawPointer?
        guard posix_memalign(&allocated, Self.alignment, Self.bufferCapacity) == 0 else { return nil }
        buffer = allocated
        return allocated
    }
}

import CDownloadKitSystem
import Glibc
import Testing

// What the tests of writes past the page cache (DirectSegmentWriteTests, SmallBodyGatherTests) ask of a
// file: which file system holds it, and how much of it the page cache holds.

/// The type of the file system holding `path` (`statfs`'s `f_type`), or -1 when it cannot be opened.
func fileSystemType(_ path: String) -> Int {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return -1 }
    defer { close(fd) }
    return dk_file_system_type(fd)
}

/// The share of `path`'s pages in the page cache (`mincore`).
func residentShare(_ path: String) throws -> Double {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    try #require(fd >= 0)
    defer { close(fd) }
    var info = stat()
    try #require(fstat(fd, &info) == 0 && info.st_size > 0)
    let size = Int(info.st_size)
    let map = mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0)
    try #require(map != MAP_FAILED)
    defer { munmap(map, size) }
    let pages = (size + 4_095) / 4_096
    var vector = [UInt8](repeating: 0, count: pages)
    try #require(mincore(map, size, &vector) == 0)
    return Double(vector.filter { $0 & 1 != 0 }.count) / Double(pages)
}

/// The space a download reserves before its body bytes flow, decided from what is known of the resource:
/// the executor checks that the file system has `length` bytes free (a clear `insufficientSpace` failure
/// before a byte is fetched, not `ENOSPC` halfway) and, when `preallocates`, reserves them (`fallocate`) so
/// the file is laid out in one piece.
package struct SpaceReservation: Sendable, Hashable {
    /// Bodies whose remaining bytes are fewer than this are not preallocated: the file system's delayed
    /// allocation lays a small body out in one piece when it is synced, and reserving it first only leaves
    /// unwritten extents for that sync to convert (the library's `DownloadConfiguration.preallocates`).
    package static let smallestPreallocation: Int64 = 1 << 20

    /// The file offset of the first byte still to come.
    package var offset: Int64
    /// The bytes still to come (more than zero).
    package var length: Int64
    /// Whether the space is reserved in the file, not only checked.
    package var preallocates: Bool

    package init(offset: Int64, length: Int64, preallocates: Bool) {
        self.offset = offset
        self.length = length
        self.preallocates = preallocates
    }

    /// The reservation for a resource of `total` bytes (nil: unknown) whose first `offset` bytes are present;
    /// nil when nothing is left to reserve. `preallocation`: the configuration allows preallocating.
    package static func forRemaining(of total: Int64?, from offset: Int64, preallocation: Bool) -> SpaceReservation? {
        guard let total, total > offset else { return nil }
        let length = total - offset
        return SpaceReservation(
            offset: offset, length: length, preallocates: preallocation && length >= smallestPreallocation)
    }
}

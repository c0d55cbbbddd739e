// Frames on the session socket: a 4-byte big-endian length, then that many bytes of UTF-8 JSON.
// Standard library only (fuzzed by Fuzz/FuzzSessionProtocol.swift).

/// Prefixes a frame body with its length.
public enum FrameEncoder {
    /// `body` with its 4-byte big-endian length in front.
    public static func frame(_ body: [UInt8]) -> [UInt8] {
        let length = UInt32(truncatingIfNeeded: body.count)
        var bytes: [UInt8] = [UInt8(length >> 24), UInt8((length >> 16) & 0xFF), UInt8((length >> 8) & 0xFF), UInt8(length & 0xFF)]
        bytes.reserveCapacity(4 + body.count)
        bytes += body
        return bytes
    }
}

/// Splits a byte stream into frames, refusing a declared length above `maxFrameBytes` before
/// allocating anything for it.
public struct FrameDecoder: Sendable {
    /// What ``next()`` found.
    public enum Step: Sendable, Hashable {
        /// A complete frame body.
        case frame([UInt8])
        /// More bytes are needed.
        case needMore
        /// The declared length is larger than the limit (the stream cannot be resynchronised: close it).
        case tooLarge(declared: Int)
    }

    /// The largest body accepted.
    public let maxFrameBytes: Int
    private var buffer: [UInt8] = []
    private var start = 0

    public init(maxFrameBytes: Int = SessionProtocol.maxFrameBytes) {
        self.maxFrameBytes = maxFrameBytes
    }

    /// Bytes received and not yet returned as frames (what a connection buffers for its peer).
    public var bufferedBytes: Int { buffer.count - start }

    /// Capacity kept for the next frames once everything buffered was returned; more is given back.
    public static let retainedCapacity = 64 << 10

    /// Bytes of storage the decoder holds (at least ``bufferedBytes``).
    public var capacity: Int { buffer.capacity }

    /// Appends received bytes.
    public mutating func append<Bytes: Sequence>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        if start > 0 && start == buffer.count { releaseConsumed() }
        buffer.append(contentsOf: bytes)
    }

    /// Forgets everything buffered and gives its storage back.
    public mutating func discardAll() {
        buffer = []
        start = 0
    }

    /// Once every buffered byte was returned: empties the buffer, keeping at most ``retainedCapacity``.
    private mutating func releaseConsumed() {
        if buffer.capacity > Self.retainedCapacity {
            buffer = []
        } else {
            buffer.removeAll(keepingCapacity: true)
        }
        start = 0
    }

    /// The next complete frame, if any.
    public mutating func next() -> Step {
        let available = buffer.count - start
        guard available >= 4 else { return .needMore }
        let declared =
            Int(buffer[start]) << 24 | Int(buffer[start + 1]) << 16 | Int(buffer[start + 2]) << 8 | Int(buffer[start + 3])
        guard declared <= maxFrameBytes else { return .tooLarge(declared: declared) }
        guard available >= 4 + declared else { return .needMore }
        let body = Array(buffer[(start + 4)..<(start + 4 + declared)])
        start += 4 + declared
        if start == buffer.count {
            releaseConsumed()
        } else if start > 1 << 16 && start * 2 > buffer.count {
            buffer.removeFirst(start)
            start = 0
        }
        return .frame(body)
    }
}

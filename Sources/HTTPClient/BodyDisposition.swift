import HTTPWire

/// What to do with a response body once its head has been seen.
public enum BodyDisposition: Sendable, Hashable {
    /// Deliver the body to the body callback.
    case stream
    /// Do not deliver it. A short body (≤ 64 KiB) is read and dropped so the connection can be
    /// reused; a longer one closes the connection.
    case discard
    /// Move the body with `splice(2)` from the socket through a pipe straight into `fileDescriptor`
    /// at `offset` onwards, without copying it through user space. Spliced bytes are reported to the
    /// `onSpliced` callback (never to the body callback). Bytes that arrived together with the head,
    /// and bodies that cannot be spliced (TLS, chunked or close-delimited framing, a file system
    /// without splice support), go to the body callback exactly as with ``stream``; the caller writes
    /// them at the same running position (`offset` plus the body bytes seen so far).
    case spliceToFile(fileDescriptor: Int32, offset: Int64)
    /// Read the body straight into memory the caller owns: each read goes into the window
    /// ``BodyReceiver/window(limit:)`` gives and is reported to ``BodyReceiver/received(_:)`` (never to
    /// the body callback), so the bytes are copied once, by the kernel. Bytes that arrived together with
    /// the head, and bodies without a `Content-Length`, go to the body callback exactly as with ``stream``.
    case receiveInPlace(InPlaceBody)
}

/// Memory a body is received into (``BodyDisposition/receiveInPlace(_:)``). The exchange calls it on
/// the thread that called `execute`, one call at a time, only while that call runs.
public protocol BodyReceiver: AnyObject {
    /// Where the next body bytes go, at most `limit` bytes (more are not used). Called before each read; an
    /// empty window sends the rest of the body to the body callback instead.
    func window(limit: Int) -> UnsafeMutableRawBufferPointer
    /// `count` bytes were read into the last window. Throwing ends the exchange with that error.
    func received(_ count: Int) throws
}

/// A ``BodyReceiver`` as a ``BodyDisposition`` payload; two are equal when they hold the same receiver.
public struct InPlaceBody: Hashable, @unchecked Sendable {
    // @unchecked: the receiver is used only on the thread of the `execute` call whose `onHead` returned
    // it, and only during that call (``BodyReceiver``); the disposition never crosses threads.
    /// Where the body goes.
    public let receiver: any BodyReceiver

    /// Wraps `receiver` for ``BodyDisposition/receiveInPlace(_:)``.
    public init(_ receiver: any BodyReceiver) {
        self.receiver = receiver
    }

    /// Whether both hold the same receiver object.
    public static func == (lhs: InPlaceBody, rhs: InPlaceBody) -> Bool { lhs.receiver === rhs.receiver }

    /// Hashes the receiver's identity.
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(receiver)) }
}

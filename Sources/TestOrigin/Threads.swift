import Glibc

/// Starts POSIX threads for the origin's blocking accept and connection loops.
///
/// The origin uses plain threads rather than Swift's cooperative pool because every loop here blocks in
/// `accept`, `recv`, `send` or a sleep (docs/ARCHITECTURE.md, threading model).
enum OriginThread {
    private final class Box {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }

    /// Starts a thread running `body`.
    ///
    /// - Parameter detached: When `true` the thread is detached and cannot be joined; its resources are
    ///   released when it ends.
    /// - Returns: The thread, to be passed to ``join(_:)`` when it is not detached.
    static func start(detached: Bool, _ body: @escaping @Sendable () -> Void) throws -> pthread_t {
        let box = Unmanaged.passRetained(Box(body)).toOpaque()
        var thread = pthread_t()
        let result = pthread_create(&thread, nil, { argument in
            guard let argument else { return nil }
            let box = Unmanaged<Box>.fromOpaque(argument).takeRetainedValue()
            box.body()
            return nil
        }, box)
        guard result == 0 else {
            Unmanaged<Box>.fromOpaque(box).release()
            return try failure(result)
        }
        if detached { pthread_detach(thread) }
        return thread
    }

    private static func failure(_ code: Int32) throws -> pthread_t {
        throw OriginError("pthread_create", errno: code, detail: String(cString: strerror(code)))
    }

    /// Waits for a joinable thread to end.
    static func join(_ thread: pthread_t) {
        pthread_join(thread, nil)
    }

    /// Whether the calling thread is `thread`.
    static func isCurrent(_ thread: pthread_t) -> Bool {
        pthread_equal(thread, pthread_self()) != 0
    }
}

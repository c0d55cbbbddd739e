import Foundation
import Logging

/// A swift-log handler that keeps every message with its merged metadata (tests of injected loggers).
public final class CapturingLogHandler: LogHandler, @unchecked Sendable {
    /// One captured message.
    public struct Line: Sendable {
        public var level: Logger.Level
        public var message: String
        public var metadata: Logger.Metadata
    }

    private let lock = NSLock()
    private var captured: [Line] = []
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .trace

    public init() {}

    /// Everything logged so far, in order.
    public var lines: [Line] { lock.withLock { captured } }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let merged = self.metadata.merging(event.metadata ?? [:]) { $1 }
        lock.withLock { captured.append(Line(level: event.level, message: event.message.description, metadata: merged)) }
    }
}

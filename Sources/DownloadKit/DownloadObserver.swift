import Foundation
import HTTPClient
import HTTPWire
import Logging
import Metrics
import Tracing

/// Logs and metrics for one download, fed from the one place its states are published
/// (``DownloadControl``): the engine itself neither logs nor counts, so every rule about what an
/// operator sees lives here.
///
/// Logging goes to the ``DownloadConfiguration/logger`` (nothing when nil). Levels: `info` for what an
/// operator wants in a normal log (start, resume offset, URL refresh, completion), `notice` for restarts
/// and the fall-back to one connection, `warning` for retries (with their delay), `error` for the final
/// failure, `debug` for redirects and segment decisions. Nothing is logged per byte or per progress tick.
/// Every line carries `download.url` and `download.id` metadata.
///
/// Metrics go through swift-metrics' global `MetricsSystem` (no-ops until a backend is bootstrapped):
/// see ``DownloadMetrics`` for the names.
///
/// Tracing: one span per download (`download`, kind client) through swift-distributed-tracing's global
/// `InstrumentationSystem.tracer`, a child of the `ServiceContext` current where the ``Download`` was
/// created (a server request's span, say). It starts at the first state change and ends with the
/// download; retries, restarts, redirects, URL refreshes and the segmented/one-connection decision are
/// span events, never progress. With no tracer bootstrapped it is the no-op tracer: one span object per
/// download, nothing per byte. Attribute names: ``DownloadMetrics/SpanAttribute``.
struct DownloadObserver: Sendable {
    private struct Run {
        var start: Double?
        var firstByte = false
        var active = false
        var span: (any Span)?
    }

    private let logger: Logger?
    private let url: String
    private let id: String
    private let context: ServiceContext
    private let run: LockedValue<Run>

    init(logger: Logger?, url: String, id: String, context: ServiceContext = .current ?? .topLevel) {
        if var logger {
            logger[metadataKey: "download.url"] = .string(redactedURL(url))
            logger[metadataKey: "download.id"] = .string(id)
            self.logger = logger
        } else {
            self.logger = nil
        }
        self.url = url
        self.id = id
        self.context = context
        run = LockedValue(Run())
    }

    func stateChanged(_ state: DownloadState, _ reason: DownloadStateReason) {
        let now = monotonicSeconds()
        let (firstStart, firstByte, span): (Bool, Double?, (any Span)?) = run.withLock { value in
            var firstStart = false
            if value.start == nil {
                value.start = now
                value.active = true
                firstStart = true
                let span = startSpan("download", context: context, ofKind: .client)
                // Without a tracer (a no-op span records nothing) the redacted URL is not built at all.
                if span.isRecording {
                    span.attributes[DownloadMetrics.SpanAttribute.url] = redactedURL(url)
                    span.attributes[DownloadMetrics.SpanAttribute.id] = id
                }
                value.span = span
            }
            var firstByte: Double?
            if state == .downloading, !value.firstByte, let start = value.start {
                value.firstByte = true
                firstByte = now - start
            }
            return (firstStart, firstByte, value.span)
        }
        if firstStart { Meter(label: DownloadMetrics.active).increment() }
        if let firstByte { Metrics.Timer(label: DownloadMetrics.timeToFirstByte).recordSeconds(firstByte) }
        switch reason {
        case .retrying(let delay, let attempt, let error):
            Counter(label: DownloadMetrics.retries).increment()
            logger?.warning(
                "retrying in \(String(format: "%.2f", delay.asSeconds)) s (attempt \(attempt)): \(error)")
            span?.addEvent(
                SpanEvent(name: "retry", attributes: ["delay_seconds": .double(delay.asSeconds), "attempt": .int64(Int64(attempt))]))
        case .restarted(let why):
            Counter(label: DownloadMetrics.restarts).increment()
            logger?.notice("restarting from byte 0: \(why.rawValue)")
            span?.addEvent(SpanEvent(name: "restart", attributes: ["reason": .string(why.rawValue)]))
        case .redirected(let target):
            Counter(label: DownloadMetrics.redirects).increment()
            logger?.debug("redirected to \(redactedURL(target))")
            span?.addEvent(SpanEvent(name: "redirect", attributes: ["url": .string(redactedURL(target))]))
        case .urlRefreshed(let target):
            Counter(label: DownloadMetrics.urlRefreshes).increment()
            logger?.info("URL refreshed to \(redactedURL(target))")
            span?.addEvent(SpanEvent(name: "url_refresh", attributes: ["url": .string(redactedURL(target))]))
        case .resumed(let offset) where state == .connecting:
            Counter(label: DownloadMetrics.requests).increment()
            logger?.info("resuming from byte \(offset)")
            span?.addEvent(SpanEvent(name: "request", attributes: ["offset": .int64(offset)]))
        case .started where state == .connecting:
            Counter(label: DownloadMetrics.requests).increment()
            logger?.info("starting")
            span?.addEvent(SpanEvent(name: "request", attributes: ["offset": .int64(0)]))
        case .segmented(let connections):
            logger?.debug("segmented over \(connections) connections")
            span?.attributes[DownloadMetrics.SpanAttribute.connections] = connections
        case .singleConnection(let why):
            logger?.notice("one connection: \(why)")
            span?.addEvent(SpanEvent(name: "single_connection", attributes: ["reason": .string(why)]))
        case .notResumable:
            logger?.notice("the server does not support resuming this resource")
        default:
            break
        }
    }

    func progressed(bytes delta: Int64) {
        guard delta > 0 else { return }
        Counter(label: DownloadMetrics.bytes).increment(by: delta)
    }

    func finished(_ outcome: Result<DownloadResult, DownloadError>) {
        let (start, wasActive, span): (Double?, Bool, (any Span)?) = run.withLock { value in
            let result = (value.start, value.active, value.span)
            value.active = false
            value.span = nil
            return result
        }
        defer { span?.end() }
        if wasActive { Meter(label: DownloadMetrics.active).decrement() }
        let seconds = start.map { monotonicSeconds() - $0 }
        switch outcome {
        case .success(let result):
            Counter(label: DownloadMetrics.finished).increment()
            if let seconds { Metrics.Timer(label: DownloadMetrics.duration).recordSeconds(seconds) }
            span?.attributes[DownloadMetrics.SpanAttribute.bytes] = result.bytes
            span?.attributes[DownloadMetrics.SpanAttribute.bytesTransferred] = result.bytesTransferred
            span?.attributes[DownloadMetrics.SpanAttribute.resumedFrom] = result.resumedFrom
            logger?.info(
                "finished: \(result.bytes) bytes at \(result.path) (\(result.bytesTransferred) fetched by this run, resumed from \(result.resumedFrom))")
        case .failure(let error):
            Counter(label: DownloadMetrics.failed, dimensions: [("code", error.code.name)]).increment()
            span?.attributes[DownloadMetrics.SpanAttribute.errorCode] = error.code.name
            if error.code == .paused || error.code == .cancelled {
                logger?.info("stopped: \(error.detail)")
            } else {
                logger?.error("failed (\(error.code.name)): \(error.detail)")
                span?.recordError(error)
                span?.setStatus(SpanStatus(code: .error, message: error.code.name))
            }
        }
    }
}

/// The swift-metrics labels DownloadKit reports (through the global `MetricsSystem`; free when no
/// backend is bootstrapped).
public enum DownloadMetrics {
    /// Counter: body bytes fetched from the network (this run's bytes, reported per progress tick).
    public static let bytes = "downloadkit_bytes_total"
    /// Counter: attempts that sent a request (a start, a resume, a retry, a restart).
    public static let requests = "downloadkit_requests_total"
    /// Counter: retries after transient failures.
    public static let retries = "downloadkit_retries_total"
    /// Counter: restarts from byte 0 (validator changed, range ignored, …).
    public static let restarts = "downloadkit_restarts_total"
    /// Counter: redirects followed.
    public static let redirects = "downloadkit_redirects_total"
    /// Counter: fresh URLs taken from the URL provider.
    public static let urlRefreshes = "downloadkit_url_refreshes_total"
    /// Counter: downloads that completed.
    public static let finished = "downloadkit_downloads_finished_total"
    /// Counter with a `code` dimension: downloads that ended without a file (paused and cancelled included).
    public static let failed = "downloadkit_downloads_failed_total"
    /// Meter: downloads between their first state change and their end.
    public static let active = "downloadkit_active_downloads"
    /// Timer: from the first state change to the first response whose body is written.
    public static let timeToFirstByte = "downloadkit_time_to_first_byte_seconds"
    /// Timer: from the first state change to completion.
    public static let duration = "downloadkit_download_duration_seconds"

    /// The attributes of the `download` tracing span (swift-distributed-tracing).
    public enum SpanAttribute {
        /// The URL as logs show it (``HTTPURL/redacting(_:_:)``: password and query values `***`).
        public static let url = "downloadkit.url"
        /// The download's identifier (also the `download.id` log metadata).
        public static let id = "downloadkit.id"
        /// Connections of a segmented transfer.
        public static let connections = "downloadkit.connections"
        /// The finished file's size in bytes.
        public static let bytes = "downloadkit.bytes"
        /// Bytes this run fetched from the network.
        public static let bytesTransferred = "downloadkit.bytes_transferred"
        /// The offset the run resumed from (0 for a fresh start).
        public static let resumedFrom = "downloadkit.resumed_from"
        /// ``DownloadError/Code`` name of a download that ended without a file.
        public static let errorCode = "downloadkit.error_code"
    }
}

/// A URL as logs may show it: the one rule, ``HTTPURL/redacting(_:_:)`` (no password, no query value).
func redactedURL(_ text: String) -> String { HTTPURL.redacting(text) }

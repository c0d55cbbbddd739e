import Foundation
import HTTPClient
import HTTPWire
import Logging
import Metrics

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
struct DownloadObserver: Sendable {
    private let logger: Logger?
    private let startedAt: LockedValue<(start: Double?, firstByte: Bool, active: Bool)>

    init(logger: Logger?, url: String, id: String) {
        if var logger {
            logger[metadataKey: "download.url"] = .string(redactedURL(url))
            logger[metadataKey: "download.id"] = .string(id)
            self.logger = logger
        } else {
            self.logger = nil
        }
        startedAt = LockedValue((nil, false, false))
    }

    func stateChanged(_ state: DownloadState, _ reason: DownloadStateReason) {
        let now = monotonicNow()
        let (firstStart, firstByte): (Bool, Double?) = startedAt.withLock { value in
            var firstStart = false
            if value.start == nil {
                value.start = now
                value.active = true
                firstStart = true
            }
            var firstByte: Double?
            if state == .downloading, !value.firstByte, let start = value.start {
                value.firstByte = true
                firstByte = now - start
            }
            return (firstStart, firstByte)
        }
        if firstStart { Meter(label: DownloadMetrics.active).increment() }
        if let firstByte { Metrics.Timer(label: DownloadMetrics.timeToFirstByte).recordSeconds(firstByte) }
        switch reason {
        case .retrying(let delay, let attempt, let error):
            Counter(label: DownloadMetrics.retries).increment()
            logger?.warning(
                "retrying in \(String(format: "%.2f", delay)) s (attempt \(attempt)): \(error)")
        case .restarted(let why):
            Counter(label: DownloadMetrics.restarts).increment()
            logger?.notice("restarting from byte 0: \(why.rawValue)")
        case .redirected(let target):
            Counter(label: DownloadMetrics.redirects).increment()
            logger?.debug("redirected to \(redactedURL(target))")
        case .urlRefreshed(let target):
            Counter(label: DownloadMetrics.urlRefreshes).increment()
            logger?.info("URL refreshed to \(redactedURL(target))")
        case .resumed(let offset) where state == .connecting:
            Counter(label: DownloadMetrics.requests).increment()
            logger?.info("resuming from byte \(offset)")
        case .started where state == .connecting:
            Counter(label: DownloadMetrics.requests).increment()
            logger?.info("starting")
        case .segmented(let connections):
            logger?.debug("segmented over \(connections) connections")
        case .singleConnection(let why):
            logger?.notice("one connection: \(why)")
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
        let (start, wasActive): (Double?, Bool) = startedAt.withLock { value in
            let result = (value.start, value.active)
            value.active = false
            return result
        }
        if wasActive { Meter(label: DownloadMetrics.active).decrement() }
        let seconds = start.map { monotonicNow() - $0 }
        switch outcome {
        case .success(let result):
            Counter(label: DownloadMetrics.finished).increment()
            if let seconds { Metrics.Timer(label: DownloadMetrics.duration).recordSeconds(seconds) }
            logger?.info(
                "finished: \(result.bytes) bytes at \(result.path) (\(result.bytesTransferred) fetched by this run, resumed from \(result.resumedFrom))")
        case .failure(let error):
            Counter(label: DownloadMetrics.failed, dimensions: [("code", error.code.name)]).increment()
            if error.code == .paused || error.code == .cancelled {
                logger?.info("stopped: \(error.detail)")
            } else {
                logger?.error("failed (\(error.code.name)): \(error.detail)")
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
}

/// A URL as logs may show it: no userinfo, and the query (often a signature) replaced by `?…`.
func redactedURL(_ text: String) -> String {
    guard var url = try? HTTPURL(text) else { return "<invalid URL>" }
    url = url.withoutUserinfo
    if url.query != nil { url.query = "…" }
    return url.absoluteString
}

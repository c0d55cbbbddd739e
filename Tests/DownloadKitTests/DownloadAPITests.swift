import DownloadKit
import Foundation
import HTTPClient
import Logging
import Metrics
import MetricsTestKit
import InMemoryTracing
import Testing
import Tracing
import TestOrigin

/// Names of this process's threads (`/proc/self/task/*/comm`), for leak checks.
private func threadNames() -> [String] {
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    return tasks.compactMap { id in
        (try? String(contentsOfFile: "/proc/self/task/\(id)/comm", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// Whether the transfer thread of `download` (named `dk-<id>`) is alive.
private func transferThreadAlive(_ download: Download) -> Bool {
    threadNames().contains("dk-\(download.id)")
}

/// Waits until `condition` holds, bounded by 60 s of wall time (a guard against hanging, not a measurement:
/// on one core shared with busy loops under ASan a count of 20 ms sleeps ran out while the transfer thread
/// was still winding down); the waits run off the cooperative pool's critical path.
private func eventually(_ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + .seconds(60)
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return condition()
}

/// swift-metrics can be bootstrapped once per process: this suite owns it.
private let testMetrics: TestMetrics = {
    let metrics = TestMetrics()
    MetricsSystem.bootstrap(metrics)
    return metrics
}()

/// swift-distributed-tracing can be bootstrapped once per process: this suite owns it too.
private let testTracer: InMemoryTracer = {
    let tracer = InMemoryTracer()
    InstrumentationSystem.bootstrap(tracer)
    return tracer
}()

/// The `downloadkit.url` attribute of a finished span ("" when absent).
private func spanURL(_ span: FinishedInMemorySpan) -> String {
    guard case .string(let url) = span.attributes[DownloadMetrics.SpanAttribute.url]?.toSpanAttribute() else { return "" }
    return url
}

@Suite("The library as Swift programs use it")
struct DownloadAPITests {
    @Test func cancellingTheAwaitingTaskKeepsTheBytesAndAttachesResumeData() async throws {
        let origin = try FaultOrigin()
        let size: Int64 = 8 << 20
        // Every response stalls after 1 MiB (longer than the test), so the cancel lands mid-body.
        origin.serve("/slow", .resource(Resource(size: size, seed: 71, faults: [.stallAfter(bytes: 1 << 20, seconds: 120, times: 100)])))
        let dir = try ScratchDirectory()
        let download = Download(
            DownloadRequest(url: origin.url("/slow"), destination: .file(dir.file("slow"))),
            configuration: testConfiguration())
        download.start()
        let waiter = Task { () -> Result<DownloadResult, DownloadError> in
            do throws(DownloadError) { return .success(try await download.result()) } catch { return .failure(error) }
        }
        // Cancel once bytes arrive (the origin stalls after 1 MiB, so the cancel lands mid-body).
        #expect(await eventually { download.progress.bytesReceived > 0 }, "progress: \(download.progress), state: \(download.state)")
        // Waited for, not sampled at one instant (the suite runs on one loaded core in the stress step).
        #expect(await eventually { transferThreadAlive(download) }, "threads: \(threadNames())")
        waiter.cancel()
        let outcome = await waiter.value
        guard case .failure(let error) = outcome else {
            Issue.record("a cancelled wait must throw, got \(outcome)")
            return
        }
        #expect(error.code == .cancelled)
        let data = try #require(error.resumeData)
        let info = try ResumeInfo.decode(data)
        #expect(info.bytesReceived > 0 && info.bytesReceived < size)
        #expect(dir.size("slow.dkpart") == info.bytesReceived)
        #expect(await eventually { !transferThreadAlive(download) })

        // The resume data alone rebuilds the request and fetches only the rest.
        origin.serve("/slow", .resource(Resource(size: size, seed: 71)))
        let resumed = try Download(resumingWith: data, configuration: testConfiguration())
        #expect(resumed.request.url == origin.url("/slow"))
        resumed.start()
        let done = try await resumed.result()
        #expect(done.resumedFrom == info.bytesReceived)
        #expect(done.bytesTransferred == size - info.bytesReceived)
        #expect(fileMatchesPattern(dir.file("slow"), size: size, seed: 71))
    }

    @Test func aDetachedWaitLeavesTheTransferRunning() async throws {
        let origin = try FaultOrigin()
        let size: Int64 = 64 << 20
        // Every response stalls after 1 MiB for longer than the test: the transfer is still running when checked.
        origin.serve("/file", .resource(Resource(size: size, seed: 72, faults: [.stallAfter(bytes: 1 << 20, seconds: 120, times: 100)])))
        let dir = try ScratchDirectory()
        let download = Download(
            DownloadRequest(url: origin.url("/file"), destination: .file(dir.file("f"))), configuration: testConfiguration())
        download.start()
        let waiter = Task { () -> DownloadError? in
            do throws(DownloadError) {
                _ = try await download.result(onCancellation: .continueTransfer)
                return nil
            } catch {
                return error
            }
        }
        #expect(await eventually { download.progress.bytesReceived > 0 })
        waiter.cancel()
        let error = await waiter.value
        #expect(error?.code == .cancelled)
        #expect(error?.resumeData == nil)
        // Only the wait ended: the transfer thread still runs and nothing was stopped.
        #expect(transferThreadAlive(download), "threads: \(threadNames())")
        #expect(download.state == .downloading || download.state == .retrying || download.state == .connecting)
        await download.cancel()
        #expect(download.state == .cancelled)
    }

    @Test func aFailedDownloadCarriesItsResumeData() async throws {
        let origin = try FaultOrigin()
        let size: Int64 = 4 << 20
        // 2 MiB then the connection resets, every time: retries run out with bytes on disk.
        origin.serve("/flaky", .resource(Resource(size: size, seed: 73, faults: [.resetAfter(bytes: 2 << 20, times: 100)])))
        let dir = try ScratchDirectory()
        let (result, _) = await runDownload(
            DownloadRequest(url: origin.url("/flaky"), destination: .file(dir.file("flaky"))),
            configuration: testConfiguration(retries: 0))
        guard case .failure(let error) = result else {
            Issue.record("expected a failure, got \(result)")
            return
        }
        let data = try #require(error.resumeData)
        #expect(try ResumeInfo.decode(data).bytesReceived == 2 << 20)

        origin.serve("/flaky", .resource(Resource(size: size, seed: 73)))
        let download = try Download(resumingWith: data, configuration: testConfiguration())
        download.start()
        let done = try await download.result()
        #expect(done.resumedFrom == 2 << 20)
        #expect(fileMatchesPattern(dir.file("flaky"), size: size, seed: 73))
    }

    @Test func appleResumeDataNeedsADestination() async throws {
        let plist: [String: Any] = [
            "NSURLSessionDownloadURL": "http://127.0.0.1:9/x", "NSURLSessionResumeBytesReceived": 10,
            "NSURLSessionResumeInfoLocalPath": "/tmp/CFNetworkDownload_x.tmp", "NSURLSessionResumeInfoVersion": 1,
        ]
        let data = try PropertyListSerialization.data(fromPropertyList: plist, format: .xml, options: 0)
        #expect(throws: DownloadError.self) { try Download(resumingWith: data) }
        let download = try Download(resumingWith: data, destination: .file("/tmp/x"))
        #expect(download.request.url == "http://127.0.0.1:9/x")
        #expect(throws: DownloadError.self) { try Download(resumingWith: Data("not a plist".utf8)) }
    }

    @Test func everyConsumerSeesEveryStateChangeAndTheEnd() async throws {
        let origin = try FaultOrigin()
        origin.serve("/two", .resource(Resource(size: 2 << 20, seed: 74)))
        let dir = try ScratchDirectory()
        let download = Download(
            DownloadRequest(url: origin.url("/two"), destination: .file(dir.file("two"))), configuration: testConfiguration())
        let first = download.events
        download.start()
        let second = download.events
        async let a = collect(first)
        async let b = collect(second)
        let (eventsA, eventsB) = await (a, b)
        let statesA = eventsA.filter { if case .progress = $0 { return false } else { return true } }
        let statesB = eventsB.filter { if case .progress = $0 { return false } else { return true } }
        // The first subscriber also got what came before it; the second sees the same from its start on.
        #expect(Array(statesA.suffix(statesB.count)) == statesB)
        #expect(statesB.count >= 1)
        guard case .finished(let result)? = statesA.last else {
            Issue.record("the last event must be the terminal one: \(statesA)")
            return
        }
        #expect(result.bytes == 2 << 20)
        // A subscriber that arrives after the end still gets the terminal event.
        let late = await collect(download.events)
        #expect(late == [.finished(result)])
    }

    @Test func aConsumerThatReadsOnlyAtTheEndStillGetsEveryStateChange() async throws {
        let origin = try FaultOrigin()
        origin.serve("/many", .resource(Resource(size: 16 << 20, seed: 75, bytesPerSecond: 64 << 20)))
        let dir = try ScratchDirectory()
        let download = Download(
            DownloadRequest(url: origin.url("/many"), destination: .file(dir.file("many"))), configuration: testConfiguration())
        let idle = download.events
        let reader = download.events
        download.start()
        _ = try await download.result()
        let late = await collect(idle)
        let keptUp = await collect(reader)
        let states = { (events: [DownloadEvent]) in events.filter { if case .progress = $0 { return false } else { return true } } }
        #expect(states(late) == states(keptUp))
        #expect(late.last.map { if case .finished = $0 { return true } else { return false } } == true)
        #expect(late.filter { if case .progress = $0 { return true } else { return false } }.count <= 512)
    }

    @Test func leavingAForAwaitEarlyEndsTheSubscriptionNotTheDownload() async throws {
        let origin = try FaultOrigin()
        origin.serve("/early", .resource(Resource(size: 2 << 20, seed: 76)))
        let dir = try ScratchDirectory()
        let download = Download(
            DownloadRequest(url: origin.url("/early"), destination: .file(dir.file("early"))), configuration: testConfiguration())
        download.start()
        #expect(await eventually { transferThreadAlive(download) || download.state == .completed })
        for await event in download.events {
            if case .stateChanged = event { break }
        }
        let result = try await download.result()
        #expect(result.bytes == 2 << 20)
        #expect(await eventually { !transferThreadAlive(download) })
    }

    @Test func anInjectedLoggerSeesTheLifecycleWithRequestMetadata() async throws {
        let origin = try FaultOrigin()
        origin.serve("/logged", .resource(Resource(size: 1 << 20, seed: 77)))
        let dir = try ScratchDirectory()
        let handler = CapturingLogHandler()
        var configuration = testConfiguration()
        configuration.logger = Logger(label: "test") { _ in handler }
        let download = Download(
            DownloadRequest(url: origin.url("/logged") + "?sig=secret", destination: .file(dir.file("logged"))),
            configuration: configuration)
        download.start()
        _ = try await download.result()
        let lines = handler.lines
        #expect(lines.contains { $0.level == .info && $0.message == "starting" })
        #expect(lines.contains { $0.level == .info && $0.message.hasPrefix("finished: 1048576 bytes") })
        #expect(lines.allSatisfy { $0.metadata["download.id"] != nil })
        // Signed query strings never reach the log.
        #expect(lines.allSatisfy { "\($0.metadata["download.url"] ?? "")".contains("secret") == false })
        #expect(lines.allSatisfy { $0.level < .info || !$0.message.contains("progress") })
    }

    @Test func metricsCountBytesRequestsAndOutcomes() async throws {
        let metrics = testMetrics
        let origin = try FaultOrigin()
        let size: Int64 = 3 << 20
        origin.serve("/counted", .resource(Resource(size: size, seed: 78, faults: [.resetAfter(bytes: 1 << 20, times: 1)])))
        let dir = try ScratchDirectory()
        func counter(_ label: String, _ dimensions: [(String, String)] = []) -> Int64 {
            (try? metrics.expectCounter(label, dimensions))?.totalValue ?? 0
        }
        let bytesBefore = counter(DownloadMetrics.bytes)
        let retriesBefore = counter(DownloadMetrics.retries)
        let finishedBefore = counter(DownloadMetrics.finished)
        let (result, _) = await runDownload(
            DownloadRequest(url: origin.url("/counted"), destination: .file(dir.file("counted"))))
        _ = try result.get()
        // Other suites' downloads run in parallel and count too: at least ours is there.
        #expect(counter(DownloadMetrics.bytes) - bytesBefore >= size)
        #expect(counter(DownloadMetrics.retries) - retriesBefore >= 1)
        #expect(counter(DownloadMetrics.finished) - finishedBefore >= 1)
        #expect(try metrics.expectTimer(DownloadMetrics.timeToFirstByte).values.isEmpty == false)
    }

    @Test func aDownloadIsOneSpanUnderTheCallersContextWithItsRetriesAsEvents() async throws {
        let tracer = testTracer
        let origin = try FaultOrigin()
        let size: Int64 = 3 << 20
        origin.serve("/traced", .resource(Resource(size: size, seed: 80, faults: [.resetAfter(bytes: 1 << 20, times: 1)])))
        origin.serve("/traced-missing", .response(status: 404, headers: [], body: []))
        let dir = try ScratchDirectory()
        // The caller's span (a server request, say): the download's span must be its child.
        let parent = tracer.startSpan("request", context: .topLevel)
        let url = origin.url("/traced") + "?sig=secret"
        let (result, failure) = await ServiceContext.withValue(parent.context) {
            let (result, _) = await runDownload(DownloadRequest(url: url, destination: .file(dir.file("traced"))))
            let (failure, _) = await runDownload(
                DownloadRequest(url: origin.url("/traced-missing"), destination: .file(dir.file("missing"))))
            return (result, failure)
        }
        parent.end()
        _ = try result.get()
        #expect(throws: DownloadError.self) { try failure.get() }

        // Other suites' downloads run in parallel and are traced too: find ours by URL.
        let spans = tracer.finishedSpans.filter {
            spanURL($0).contains("/traced")
        }
        let ok = try #require(spans.first { spanURL($0).hasSuffix("/traced?sig=***") })
        #expect(ok.operationName == "download")
        #expect(ok.kind == .client)
        #expect(ok.spanContext.parentSpanID == parent.context.inMemorySpanContext?.spanID)
        #expect(ok.spanContext.traceID == parent.context.inMemorySpanContext?.traceID)
        #expect(ok.attributes[DownloadMetrics.SpanAttribute.bytes]?.toSpanAttribute() == .int64(size))
        #expect(ok.events.contains { $0.name == "retry" })
        #expect(ok.status == nil)
        // Signed query strings never reach a span.
        #expect(spans.allSatisfy { !"\($0.attributes)".contains("secret") })

        let failed = try #require(spans.first { spanURL($0).hasSuffix("/traced-missing") })
        #expect(failed.status?.code == .error)
        #expect(failed.errors.count == 1)
    }

    @Test func sha384AndSha512Checksums() async throws {
        let origin = try FaultOrigin()
        let size: Int64 = 1 << 20
        origin.serve("/sum", .resource(Resource(size: size, seed: 79)))
        let bytes = TestPattern.bytes(offset: 0, count: Int(size), seed: 79)
        for algorithm in [DigestAlgorithm.sha384, .sha512] {
            let hex = DKDigest.hex(DKDigest.hash(algorithm, bytes))
            let checksum = try #require(Checksum(parsing: "\(algorithm.rawValue)=\(hex.uppercased())"))
            let dir = try ScratchDirectory()
            let (result, _) = await runDownload(
                DownloadRequest(url: origin.url("/sum"), destination: .file(dir.file("sum")), checksum: checksum))
            #expect(try result.get().checksumHex == hex)
            let wrong = Checksum(algorithm: algorithm, expectedHex: String(repeating: "0", count: algorithm.byteCount * 2))
            let (bad, _) = await runDownload(
                DownloadRequest(url: origin.url("/sum"), destination: .file(dir.file("bad")), checksum: wrong))
            if case .failure(let error) = bad { #expect(error.code == .checksumMismatch) } else { Issue.record("accepted a wrong \(algorithm)") }
        }
        #expect(Checksum(parsing: "sha512=abcd") == nil)
    }

    @Test func theResultCarriesTheFinalResponsesStatusHeadersAndValidators() async throws {
        let origin = try FaultOrigin()
        let size: Int64 = 2 << 20
        origin.serve(
            "/typed", .resource(Resource(size: size, seed: 84, contentType: "application/x-iso9660-image",
                                         faults: [.resetAfter(bytes: 1 << 20, times: 1)])))
        let dir = try ScratchDirectory()
        let (outcome, _) = await runDownload(DownloadRequest(url: origin.url("/typed"), destination: .file(dir.file("t"))))
        let result = try outcome.get()
        // The reset made the engine resume: the bytes that finished the file came in a 206.
        #expect(result.responseStatus == 206)
        #expect(result.responseHeaders?.first(name: "Content-Type") == "application/x-iso9660-image")
        #expect(result.entityTag == Resource.derivedETag(seed: 84, size: size))
        #expect(result.lastModified == Resource.defaultLastModified)
    }

    @Test func foundationURLOverloads() throws {
        let request = DownloadRequest(
            url: URL(string: "https://example.com/a.iso")!, destination: URL(fileURLWithPath: "/data/a.iso"))
        #expect(request.url == "https://example.com/a.iso")
        #expect(request.destination == .file("/data/a.iso"))
        #expect(DownloadDestination.directory(URL(fileURLWithPath: "/data"), naming: .md5OfURL) == .directory("/data", naming: .md5OfURL))
    }

    private func collect(_ events: EventSequence<DownloadEvent>) async -> [DownloadEvent] {
        var all: [DownloadEvent] = []
        for await event in events { all.append(event) }
        return all
    }
}

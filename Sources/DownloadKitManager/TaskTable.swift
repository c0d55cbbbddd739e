/// The manager's tasks and the indexes that find them — by URL, by file identifier, by group — kept true
/// together: every task added, changed or removed goes through here, so no path can change a task and leave an
/// index naming what it no longer is.
///
/// The URL index: a task's original URL names it, unless a newer task of the same URL exists (there are
/// several only after ``TaskRequest/reusesLiveTaskOnly`` made a new one beside a stopped one: the newest is the
/// one found). Its current URL (a redirect's or a refresh's target, a caller's replacement) names it too unless
/// another task has it, and stops naming it when the task moves on to another URL.
struct TaskTable {
    private(set) var byID: [String: ManagedTask] = [:]
    private var byURL: [String: String] = [:]
    private var byFileID: [String: String] = [:]
    private var groups: [String: Set<String>] = [:]

    subscript(id: String) -> ManagedTask? { byID[id] }

    var values: Dictionary<String, ManagedTask>.Values { byID.values }
    var count: Int { byID.count }

    /// Room for `extra` more tasks in every table at once (a batch enqueue grew them one rehash at a time).
    mutating func reserveCapacity(adding extra: Int) {
        byID.reserveCapacity(byID.count + extra)
        byURL.reserveCapacity(byURL.count + extra)
    }

    /// The task a URL names (its original URL, or its current one).
    func id(forURL url: String) -> String? { byURL[url] }

    /// The task with this file identifier.
    func id(forFileID fileID: String) -> String? { byFileID[fileID] }

    /// Whether `task` is the one its original URL finds (the newest of that URL).
    func isNewestOfItsURL(_ task: ManagedTask) -> Bool { byURL[task.originalURL] == task.id }

    /// The tasks of a group, in waiting-line order.
    func members(ofGroup group: String) -> [ManagedTask] {
        (groups[group] ?? []).compactMap { byID[$0] }.sorted { ($0.queueOrder, $0.id) < ($1.queueOrder, $1.id) }
    }

    /// Adds a new or restored task (restored in any order: the newest of a URL wins whichever comes first).
    mutating func insert(_ task: ManagedTask) {
        byID[task.id] = task
        if let current = byURL[task.originalURL], current != task.id, let other = byID[current],
            (other.createdAt, other.id) > (task.createdAt, task.id)
        {
            // The newer one keeps the URL.
        } else {
            byURL[task.originalURL] = task.id
        }
        if byURL[task.currentURL] == nil { byURL[task.currentURL] = task.id }
        if let fileID = task.fileID { byFileID[fileID] = task.id }
        if let group = task.group { groups[group, default: []].insert(task.id) }
    }

    /// Replaces a task by its newer value, moving it in the indexes where its current URL, file identifier or
    /// group changed.
    mutating func update(_ task: ManagedTask) {
        guard let old = byID.updateValue(task, forKey: task.id) else {
            // Not known (removed meanwhile): a changed value of a gone task does not bring it back.
            byID[task.id] = nil
            return
        }
        if old.currentURL != task.currentURL {
            if old.currentURL != task.originalURL, byURL[old.currentURL] == task.id { byURL[old.currentURL] = nil }
            if byURL[task.currentURL] == nil { byURL[task.currentURL] = task.id }
        }
        if old.fileID != task.fileID {
            if let fileID = old.fileID, byFileID[fileID] == task.id { byFileID[fileID] = nil }
            if let fileID = task.fileID { byFileID[fileID] = task.id }
        }
        if old.group != task.group {
            leave(group: old.group, task.id)
            if let group = task.group { groups[group, default: []].insert(task.id) }
        }
    }

    /// Removes a task from the table and from every index that names it.
    mutating func remove(_ id: String) {
        guard let task = byID.removeValue(forKey: id) else { return }
        for url in [task.originalURL, task.currentURL] where byURL[url] == id { byURL[url] = nil }
        if let fileID = task.fileID, byFileID[fileID] == id { byFileID[fileID] = nil }
        leave(group: task.group, id)
    }

    private mutating func leave(group: String?, _ id: String) {
        guard let group else { return }
        groups[group]?.remove(id)
        if groups[group]?.isEmpty == true { groups[group] = nil }
    }
}

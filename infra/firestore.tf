# Firestore in native mode: the records (docs/contract.md, "Firestore"), their one composite index and
# the TTL policy of tombstones.

resource "google_firestore_database" "default" {
  name        = "(default)" # the clients use the default database
  location_id = local.firestore_location
  type        = "FIRESTORE_NATIVE"

  delete_protection_state           = "DELETE_PROTECTION_ENABLED"
  point_in_time_recovery_enablement = var.firestore_point_in_time_recovery ? "POINT_IN_TIME_RECOVERY_ENABLED" : "POINT_IN_TIME_RECOVERY_DISABLED"
  # terraform destroy leaves the database (and every record) in place; see docs/deploy.md
  # ("Remove it") to delete it on purpose.
  deletion_policy = "ABANDON"

  depends_on = [google_project_service.apis]
}

# The composite queries the adapters run (the drift test reads their declarations). This one
# (shared/adapters/firestore/job_store.py, WATCHING) is the checkpoint lookup of an upload,
# checkpointPrefix == P and state in [active states]. Every other query but the next one
# filters and orders on one field and uses Firestore's automatic single-field indexes.
resource "google_firestore_index" "jobs_checkpoint_prefix_state" {
  database    = google_firestore_database.default.name
  collection  = "jobs"
  query_scope = "COLLECTION"

  fields {
    field_path = "checkpointPrefix"
    order      = "ASCENDING"
  }
  fields {
    field_path = "state"
    order      = "ASCENDING"
  }
}

# Admission (shared/adapters/firestore/job_store.py, WAITING): the records waiting for
# admission, oldest first: admission.stage == WAITING, ordered by admission.waitingSince.
resource "google_firestore_index" "jobs_admission_waiting" {
  database    = google_firestore_database.default.name
  collection  = "jobs"
  query_scope = "COLLECTION"

  fields {
    field_path = "admission.stage"
    order      = "ASCENDING"
  }
  fields {
    field_path = "admission.waitingSince"
    order      = "ASCENDING"
  }
}

# Admission's line of one queue (shared/adapters/firestore/job_store.py, WAITING_IN): the
# records waiting in that queue, oldest first, each pass reading every queue's whole line
# (and counting one at intake, against its cap): admission.stage == WAITING and
# admission.queue == Q, ordered by admission.waitingSince.
resource "google_firestore_index" "jobs_admission_waiting_in_queue" {
  database    = google_firestore_database.default.name
  collection  = "jobs"
  query_scope = "COLLECTION"

  fields {
    field_path = "admission.stage"
    order      = "ASCENDING"
  }
  fields {
    field_path = "admission.queue"
    order      = "ASCENDING"
  }
  fields {
    field_path = "admission.waitingSince"
    order      = "ASCENDING"
  }
}

# Each deployment's step reads its endpoint's neighbours that have not ended
# (shared/adapters/firestore/deployment_store.py, ON_ENDPOINT): endpoint == E and state in
# [ACCEPTED, DEPLOYING, DEPLOYED].
resource "google_firestore_index" "deployments_endpoint_state" {
  database    = google_firestore_database.default.name
  collection  = "deployments"
  query_scope = "COLLECTION"

  fields {
    field_path = "endpoint"
    order      = "ASCENDING"
  }
  fields {
    field_path = "state"
    order      = "ASCENDING"
  }
}

# The status page's list filtered by state (shared/adapters/firestore/views.py,
# JOBS_IN_STATES and JOBS_IN_STATES_SINCE): state in [chosen states], optionally createdAt >=
# T, newest first (createdAt, then the document id, descending).
resource "google_firestore_index" "jobs_state_created_at" {
  database    = google_firestore_database.default.name
  collection  = "jobs"
  query_scope = "COLLECTION"

  fields {
    field_path = "state"
    order      = "ASCENDING"
  }
  fields {
    field_path = "createdAt"
    order      = "DESCENDING"
  }
}

# Tombstones (a cancel for a requestId not seen yet, two days ahead) and SKIPPED slots of a
# schedule (seven days ahead) carry expireAt; Firestore deletes them after that time. No query
# reads expireAt, so its single-field indexes are off (an empty index_config), which also
# avoids a hotspot on monotonically increasing times. Rejections have no expiry field: they
# are kept.
resource "google_firestore_field" "jobs_expire_at" {
  database   = google_firestore_database.default.name
  collection = "jobs"
  field      = "expireAt"

  ttl_config {}
  index_config {}
}

# The scheduler tick's watch list and tally (collection `watch`, docs/contract.md): a shard's
# `data` is up to 1,000,000 bytes of compressed bytes, the tally's `buckets` and `newest` up to
# a few hundred KiB of JSON text. Nothing queries them (the tick and the status page read
# these documents by key), so their single-field indexes are off.
resource "google_firestore_field" "watch_unindexed" {
  for_each   = toset(["data", "buckets", "newest"])
  database   = google_firestore_database.default.name
  collection = "watch"
  field      = each.key

  index_config {}
}

# The admission line and the followed list (collections `line` and `followed`,
# docs/contract.md), kept as the watch list is: a shard's `data` is up to 1,000,000 bytes of
# compressed bytes, read only by key, so its single-field indexes are off too.
resource "google_firestore_field" "list_shards_unindexed" {
  for_each   = toset(["line", "followed"])
  database   = google_firestore_database.default.name
  collection = each.key
  field      = "data"

  index_config {}
}

// libvirt domain lifecycle events for Node.js, the one thing the @unraid/libvirt binding lacks.
//
//   open(uri, onEvent) -> Promise<Watch>   opens a read-only connection and subscribes to the
//                                          lifecycle events of every domain on it
//   watch.close()      -> Promise<void>    unsubscribes and closes the connection
//   onEvent(name, event, detail)           a domain's lifecycle event (virDomainEventType and its
//                                          detail); name null: the connection closed, event is
//                                          its virConnectCloseReason
//
// libvirt delivers events only from an event loop: one thread runs libvirt's default loop for the
// whole process. Its callbacks cross to the JavaScript thread through a thread-safe function.
// Opening and closing a connection block on libvirtd, so they run on libuv's pool, never on the
// JavaScript thread (a hung daemon must not stall the agent).
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <node_api.h>

#define CHECK(env, call)                                                   \
  do {                                                                     \
    if ((call) != napi_ok) {                                               \
      napi_throw_error((env), NULL, "libvirt-events: " #call " failed");   \
      return NULL;                                                         \
    }                                                                      \
  } while (0)

static pthread_once_t loop_once = PTHREAD_ONCE_INIT;
static char loop_error[256];

static void *run_loop(void *unused) {
  for (;;) {
    // An error here is libvirt's own (a poll() failure); back off instead of spinning on it.
    if (virEventRunDefaultImpl() < 0) usleep(100 * 1000);
  }
  return NULL;
}

// Errors are returned to JavaScript with their message; libvirt's default prints them to stderr.
static void ignore_error(void *unused, virErrorPtr error) {}

static void start_loop(void) {
  virSetErrorFunc(NULL, ignore_error);
  if (virEventRegisterDefaultImpl() < 0) {
    snprintf(loop_error, sizeof loop_error, "cannot register libvirt's event loop: %s", virGetLastErrorMessage());
    return;
  }
  pthread_attr_t attr;
  pthread_t thread;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&thread, &attr, run_loop, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) snprintf(loop_error, sizeof loop_error, "cannot start libvirt's event thread: %s", strerror(rc));
}

// One subscription. Its memory has a lifetime of its own, counted in refs: one for the
// thread-safe function (dropped by its finaliser, which Node may run early, at the teardown of the
// environment, while libvirt still holds the watch), and one for each libvirt registration
// (dropped by libvirt's free callback, which comes only once no callback of it is running). The
// thread-safe function is used only under the lock, and only while its finaliser has not run.
typedef struct {
  pthread_mutex_t lock;
  int refs;
  napi_threadsafe_function tsfn;  // NULL once finalised
  virConnectPtr conn;
  int callback_id;
  int close_registered;
  // Work on the pool: the URI to open, or the error it failed with.
  char *uri;
  char error[512];
  napi_deferred deferred;
  napi_async_work work;
} watch_t;

static void unref_watch(watch_t *w) {
  pthread_mutex_lock(&w->lock);
  int left = --w->refs;
  pthread_mutex_unlock(&w->lock);
  if (left > 0) return;
  pthread_mutex_destroy(&w->lock);
  free(w->uri);
  free(w);
}

static void ref_watch(watch_t *w) {
  pthread_mutex_lock(&w->lock);
  w->refs++;
  pthread_mutex_unlock(&w->lock);
}

typedef struct {
  char *name;  // NULL: the connection closed
  int event;
  int detail;
} message_t;

static void post(watch_t *w, const char *name, int event, int detail) {
  message_t *m = calloc(1, sizeof *m);
  if (!m) return;
  m->name = name ? strdup(name) : NULL;
  m->event = event;
  m->detail = detail;
  napi_status status = napi_closing;
  pthread_mutex_lock(&w->lock);
  if (w->tsfn) status = napi_call_threadsafe_function(w->tsfn, m, napi_tsfn_nonblocking);
  pthread_mutex_unlock(&w->lock);
  if (status != napi_ok) {
    free(m->name);
    free(m);
  }
}

static int on_lifecycle(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque) {
  const char *name = virDomainGetName(dom);
  if (name) post(opaque, name, event, detail);
  return 0;
}

static void on_close(virConnectPtr conn, int reason, void *opaque) {
  post(opaque, NULL, reason, 0);
}

static void release_registration(void *opaque) {
  unref_watch(opaque);
}

static void call_js(napi_env env, napi_value callback, void *context, void *data) {
  message_t *m = data;
  if (env && callback) {
    napi_value args[3], undefined;
    if (m->name) napi_create_string_utf8(env, m->name, NAPI_AUTO_LENGTH, &args[0]);
    else napi_get_null(env, &args[0]);
    napi_create_int32(env, m->event, &args[1]);
    napi_create_int32(env, m->detail, &args[2]);
    napi_get_undefined(env, &undefined);
    napi_call_function(env, undefined, callback, 3, args, NULL);
  }
  free(m->name);
  free(m);
}

static void finalize_tsfn(napi_env env, void *data, void *hint) {
  watch_t *w = data;
  pthread_mutex_lock(&w->lock);
  w->tsfn = NULL;
  pthread_mutex_unlock(&w->lock);
  unref_watch(w);
}

static void set_error(watch_t *w, const char *what) {
  snprintf(w->error, sizeof w->error, "%s: %s", what, virGetLastErrorMessage());
}

// --- open ---------------------------------------------------------------------------------

static void open_execute(napi_env env, void *data) {
  watch_t *w = data;
  w->conn = virConnectOpenReadOnly(w->uri);
  if (!w->conn) {
    set_error(w, "cannot connect");
    return;
  }
  ref_watch(w);
  w->callback_id = virConnectDomainEventRegisterAny(w->conn, NULL, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                                                    VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), w, release_registration);
  if (w->callback_id < 0) {
    set_error(w, "cannot subscribe to domain events");
    unref_watch(w);  // libvirt does not call the free callback of a failed registration
    virConnectClose(w->conn);
    w->conn = NULL;
    return;
  }
  // Drivers that never lose their connection (the in-process test driver) accept the close
  // callback and never call it, nor its free callback: their watch's memory is never given back.
  ref_watch(w);
  if (virConnectRegisterCloseCallback(w->conn, on_close, w, release_registration) < 0) {
    // Without it a lost connection would go unnoticed, and the caller would wait for events forever.
    set_error(w, "cannot watch the event connection");
    unref_watch(w);
    virConnectDomainEventDeregisterAny(w->conn, w->callback_id);
    virConnectClose(w->conn);
    w->conn = NULL;
    return;
  }
  w->close_registered = 1;
  // A frozen libvirtd is then noticed (the close callback, reason keepalive) instead of leaving
  // the agent waiting for events that never come. Local drivers have no keepalive.
  if (virConnectSetKeepAlive(w->conn, 5, 3) < 0) virResetLastError();
}

static napi_value make_watch_object(napi_env env, watch_t *w);

static void open_complete(napi_env env, napi_status status, void *data) {
  watch_t *w = data;
  napi_delete_async_work(env, w->work);
  w->work = NULL;
  if (w->conn) {
    napi_resolve_deferred(env, w->deferred, make_watch_object(env, w));
    return;
  }
  napi_value message, error;
  napi_create_string_utf8(env, w->error[0] ? w->error : "cannot connect", NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, NULL, message, &error);
  napi_reject_deferred(env, w->deferred, error);
  // Its finaliser drops the last ref.
  napi_release_threadsafe_function(w->tsfn, napi_tsfn_release);
}

static napi_value open_watch(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  napi_valuetype t0, t1;
  if (argc < 2 || napi_typeof(env, argv[0], &t0) != napi_ok || napi_typeof(env, argv[1], &t1) != napi_ok ||
      t0 != napi_string || t1 != napi_function) {
    napi_throw_type_error(env, NULL, "open(uri: string, onEvent: function)");
    return NULL;
  }
  pthread_once(&loop_once, start_loop);
  if (loop_error[0]) {
    napi_throw_error(env, NULL, loop_error);
    return NULL;
  }
  size_t len;
  CHECK(env, napi_get_value_string_utf8(env, argv[0], NULL, 0, &len));
  watch_t *w = calloc(1, sizeof *w);
  if (!w || !(w->uri = malloc(len + 1))) {
    free(w);
    napi_throw_error(env, NULL, "out of memory");
    return NULL;
  }
  pthread_mutex_init(&w->lock, NULL);
  w->refs = 1;  // the thread-safe function's
  CHECK(env, napi_get_value_string_utf8(env, argv[0], w->uri, len + 1, &len));
  w->callback_id = -1;
  napi_value name, promise;
  CHECK(env, napi_create_string_utf8(env, "libvirt-events", NAPI_AUTO_LENGTH, &name));
  CHECK(env, napi_create_threadsafe_function(env, argv[1], NULL, name, 0, 1, w, finalize_tsfn, w, call_js, &w->tsfn));
  // Events must not keep the process alive on their own.
  CHECK(env, napi_unref_threadsafe_function(env, w->tsfn));
  CHECK(env, napi_create_promise(env, &w->deferred, &promise));
  CHECK(env, napi_create_async_work(env, NULL, name, open_execute, open_complete, w, &w->work));
  CHECK(env, napi_queue_async_work(env, w->work));
  return promise;
}

// --- close --------------------------------------------------------------------------------

static void close_execute(napi_env env, void *data) {
  watch_t *w = data;
  // Each unregistration drops its ref through libvirt's free callback (now, or once a callback
  // running on the loop thread returns). A failed one leaves its callback armed, with its ref:
  // never a callback on freed memory.
  if (w->callback_id >= 0) virConnectDomainEventDeregisterAny(w->conn, w->callback_id);
  if (w->close_registered) virConnectUnregisterCloseCallback(w->conn, on_close);
  virConnectClose(w->conn);
}

static void close_complete(napi_env env, napi_status status, void *data) {
  watch_t *w = data;
  napi_delete_async_work(env, w->work);
  w->work = NULL;
  napi_value undefined;
  napi_get_undefined(env, &undefined);
  napi_resolve_deferred(env, w->deferred, undefined);
  napi_release_threadsafe_function(w->tsfn, napi_tsfn_release);
}

static napi_value close_watch(napi_env env, napi_callback_info info) {
  napi_value self, promise;
  void *data;
  CHECK(env, napi_get_cb_info(env, info, NULL, NULL, &self, &data));
  watch_t *w = NULL;
  if (napi_unwrap(env, self, (void **)&w) != napi_ok || !w) {
    napi_throw_error(env, NULL, "not a libvirt-events watch");
    return NULL;
  }
  if (!w->conn || w->work) {
    napi_throw_error(env, NULL, "the watch is already closed");
    return NULL;
  }
  CHECK(env, napi_create_promise(env, &w->deferred, &promise));
  napi_value name;
  CHECK(env, napi_create_string_utf8(env, "libvirt-events", NAPI_AUTO_LENGTH, &name));
  CHECK(env, napi_create_async_work(env, NULL, name, close_execute, close_complete, w, &w->work));
  CHECK(env, napi_queue_async_work(env, w->work));
  // From here the watch belongs to the close; a second close() is refused above.
  napi_remove_wrap(env, self, NULL);
  return promise;
}

static napi_value make_watch_object(napi_env env, watch_t *w) {
  napi_value obj, fn;
  napi_create_object(env, &obj);
  napi_create_function(env, "close", NAPI_AUTO_LENGTH, close_watch, NULL, &fn);
  napi_set_named_property(env, obj, "close", fn);
  // The wrap only points at the watch; the thread-safe function's finaliser frees it.
  napi_wrap(env, obj, w, NULL, NULL, NULL);
  return obj;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_value fn;
  CHECK(env, napi_create_function(env, "open", NAPI_AUTO_LENGTH, open_watch, NULL, &fn));
  CHECK(env, napi_set_named_property(env, exports, "open", fn));
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)

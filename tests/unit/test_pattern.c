/*
 * Pattern matcher tests. Patterns and events are JSON text with ' standing
 * for " (so rows stay readable); the pattern goes through jansson exactly as
 * the template parser hands it over, the event through event_parse_json.
 */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>

#include "io/event.h"
#include "model/pattern.h"
#include "base/rfc3339.h"
#include "t.h"
#include "tfiles.h"
#include "base/util.h"

#define NOW "2026-09-13T12:00:00Z"

static char *unquote(const char *s)
{
	char *r = xstrdup(s);
	for (char *p = r; *p; p++)
		if (*p == '\'')
			*p = '"';
	return r;
}

static json_t *pjson(const char *text)
{
	char *t = unquote(text);
	json_error_t e;
	json_t *j = json_loads(t, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
	if (!j)
		printf("  bad test JSON %s: %s\n", t, e.text);
	free(t);
	return j;
}

static struct event *pevent(const char *text)
{
	char *t = unquote(text);
	struct event *ev = NULL;
	char *why = NULL;
	if (event_parse_json(t, strlen(t), &ev, &why) != EVENT_OK)
		printf("  bad test event %s: %s\n", t, why);
	free(why);
	free(t);
	return ev;
}

static int64_t ns_of(const char *ts)
{
	int64_t ns = 0;
	if (rfc3339_parse_ns(ts, strlen(ts), &ns) < 0)
		printf("  bad test time %s\n", ts);
	return ns;
}

struct match_row {
	const char *pattern, *event, *now;
	int want;
};

/* clang-format off */
static const struct match_row match_rows[] = {
	/* implicit equality */
	{"{'status':['COMPLETED','FAILED']}", "{'status':'COMPLETED'}", NULL, 1},
	{"{'status':['COMPLETED','FAILED']}", "{'status':'FAILED'}", NULL, 1},
	{"{'status':['COMPLETED','FAILED']}", "{'status':'PENDING'}", NULL, 0},
	{"{'status':['COMPLETED','FAILED']}", "{}", NULL, 0},
	{"{'status':['COMPLETED','FAILED']}", "{'status':null}", NULL, 0},
	{"{'status':['COMPLETED']}", "{'status':'completed'}", NULL, 0},
	{"{'status':['COMPLETED']}", "{'status':['COMPLETED']}", NULL, 0},
	{"{'status':['COMPLETED']}", "{'status':{'COMPLETED':1}}", NULL, 0},
	{"{'status':['COMPLETED']}", "{'other':'COMPLETED'}", NULL, 0},
	{"{'n':[5]}", "{'n':5}", NULL, 1},
	{"{'n':[5]}", "{'n':5.0}", NULL, 1},
	{"{'n':[5.0]}", "{'n':5}", NULL, 1},
	{"{'n':[5]}", "{'n':'5'}", NULL, 0},
	{"{'n':['5']}", "{'n':5}", NULL, 0},
	{"{'n':[1]}", "{'n':true}", NULL, 0},
	{"{'n':[0]}", "{'n':false}", NULL, 0},
	{"{'b':[true]}", "{'b':1}", NULL, 0},
	{"{'b':[true]}", "{'b':true}", NULL, 1},
	{"{'b':[true]}", "{'b':'true'}", NULL, 0},
	{"{'b':[false]}", "{'b':false}", NULL, 1},
	{"{'b':[false]}", "{'b':null}", NULL, 0},
	{"{'b':[false]}", "{'b':0}", NULL, 0},
	{"{'x':[null]}", "{'x':null}", NULL, 1},
	{"{'x':[null]}", "{}", NULL, 0},
	{"{'x':[null]}", "{'x':0}", NULL, 0},
	{"{'x':[null]}", "{'x':''}", NULL, 0},
	{"{'x':[null]}", "{'x':false}", NULL, 0},
	{"{'x':[null]}", "{'x':'null'}", NULL, 0},
	{"{'n':[9007199254740993]}", "{'n':9007199254740992}", NULL, 0},
	{"{'n':[9007199254740993]}", "{'n':9007199254740993}", NULL, 1},
	{"{'n':[9223372036854775807]}", "{'n':9223372036854775807}", NULL, 1},
	{"{'n':[-9223372036854775808]}", "{'n':-9223372036854775808}", NULL, 1},
	{"{'n':[9223372036854775807]}", "{'n':9223372036854775806}", NULL, 0},
	{"{'n':[9007199254740993]}", "{'n':9007199254740993.0}", NULL, 0},
	{"{'n':[9007199254740992]}", "{'n':9007199254740993.0}", NULL, 1},
	{"{'n':[9223372036854775807]}", "{'n':9223372036854775807.0}", NULL, 0},
	{"{'n':[1.5]}", "{'n':1.5}", NULL, 1},
	{"{'n':[1.5]}", "{'n':1.50}", NULL, 1},
	{"{'n':[1.5]}", "{'n':15e-1}", NULL, 1},
	{"{'n':[0]}", "{'n':-0.0}", NULL, 1},
	{"{'n':[0.0]}", "{'n':-0}", NULL, 1},
	{"{'n':[0.1]}", "{'n':0.1}", NULL, 1},
	{"{'n':[100]}", "{'n':1e2}", NULL, 1},
	{"{'n':[100]}", "{'n':1E+2}", NULL, 1},
	{"{'n':[1]}", "{'n':1.0000000000000002}", NULL, 0},
	{"{'n':[1]}", "{'n':18446744073709551616}", NULL, 0},
	{"{'n':[1e19]}", "{'n':10000000000000000000}", NULL, 1},
	{"{'n':[-1]}", "{'n':-1}", NULL, 1},
	{"{'n':[-1]}", "{'n':1}", NULL, 0},
	{"{'s':['']}", "{'s':''}", NULL, 1},
	{"{'s':['']}", "{}", NULL, 0},
	{"{'s':['']}", "{'s':null}", NULL, 0},
	{"{'s':['h\\u00e9llo']}", "{'s':'h\\u00e9llo'}", NULL, 1},
	{"{'s':['h\\u00e9llo']}", "{'s':'h\xc3\xa9llo'}", NULL, 1},
	{"{'s':['\\ud83d\\ude00']}", "{'s':'\xf0\x9f\x98\x80'}", NULL, 1},
	{"{'s':['a\\u0000b']}", "{'s':'a\\u0000b'}", NULL, 1},
	{"{'s':['a\\u0000b']}", "{'s':'a'}", NULL, 0},
	{"{'s':['e\\u0301']}", "{'s':'\\u00e9'}", NULL, 0},
	{"{'s':['a','b','c']}", "{'s':'c'}", NULL, 1},
	{"{'v':['5',5,true,null]}", "{'v':null}", NULL, 1},
	{"{'v':['5',5,true,null]}", "{'v':false}", NULL, 0},
	{"{'v':['5',5,true,null]}", "{'v':5.0}", NULL, 1},
	{"{'cl\\u00e9':['v']}", "{'cl\xc3\xa9':'v'}", NULL, 1},
	{"{'a':['1'],'a2':['2']}", "{'a':'1','a':'2','a2':'2'}", NULL, 0},
	{"{'a':['2']}", "{'a':'1','a':'2'}", NULL, 1},
	{"{'a':['1']}", "{'a':'1','a':'2'}", NULL, 0},
	{"{'k9':['v']}", "{'k1':1,'k2':2,'k3':3,'k4':4,'k5':5,'k6':6,'k7':7,'k8':8,'k9':'v','k10':10}", NULL, 1},
	{"{'k9':['v']}", "{'k1':1,'k2':2,'k3':3,'k4':4,'k5':5,'k6':6,'k7':7,'k8':8,'k9':'v','k9':'w'}", NULL, 0},
	{"{'k0':{'exists':true}}", "{'k1':1,'k2':2,'k3':3,'k4':4,'k5':5,'k6':6,'k7':7,'k8':8,'k9':'v','k10':10}", NULL, 0},

	/* equals */
	{"{'s':{'equals':['x']}}", "{'s':'x'}", NULL, 1},
	{"{'s':{'equals':'x'}}", "{'s':'x'}", NULL, 1},
	{"{'s':{'equals':['x']}}", "{'s':'y'}", NULL, 0},
	{"{'s':{'equals':['x','y']}}", "{'s':'y'}", NULL, 1},
	{"{'n':{'equals':[5.0]}}", "{'n':5}", NULL, 1},
	{"{'n':{'equals':5}}", "{'n':'5'}", NULL, 0},
	{"{'x':{'equals':[null]}}", "{'x':null}", NULL, 1},
	{"{'x':{'equals':null}}", "{'x':null}", NULL, 1},
	{"{'x':{'equals':[false]}}", "{}", NULL, 0},
	{"{'x':{'equals':[true]}}", "{'x':[true]}", NULL, 0},

	/* prefix */
	{"{'id':{'prefix':['user_']}}", "{'id':'user_123'}", NULL, 1},
	{"{'id':{'prefix':['user_']}}", "{'id':'123'}", NULL, 0},
	{"{'id':{'prefix':['user_']}}", "{'id':'user_'}", NULL, 1},
	{"{'id':{'prefix':['user_']}}", "{'id':'user'}", NULL, 0},
	{"{'id':{'prefix':['user_']}}", "{'id':'USER_1'}", NULL, 0},
	{"{'id':{'prefix':['user_']}}", "{}", NULL, 0},
	{"{'id':{'prefix':['12']}}", "{'id':123}", NULL, 0},
	{"{'id':{'prefix':['tr']}}", "{'id':true}", NULL, 0},
	{"{'id':{'prefix':['n']}}", "{'id':null}", NULL, 0},
	{"{'id':{'prefix':['a']}}", "{'id':['abc']}", NULL, 0},
	{"{'id':{'prefix':['a']}}", "{'id':{'abc':1}}", NULL, 0},
	{"{'id':{'prefix':['']}}", "{'id':''}", NULL, 1},
	{"{'id':{'prefix':['']}}", "{'id':'x'}", NULL, 1},
	{"{'id':{'prefix':['']}}", "{'id':5}", NULL, 0},
	{"{'id':{'prefix':['']}}", "{}", NULL, 0},
	{"{'id':{'prefix':'user_'}}", "{'id':'user_x'}", NULL, 1},
	{"{'id':{'prefix':['a','user_']}}", "{'id':'user_x'}", NULL, 1},
	{"{'id':{'prefix':['h\\u00e9']}}", "{'id':'h\\u00e9llo'}", NULL, 1},
	{"{'id':{'prefix':['\xf0\x9f\x98\x80']}}", "{'id':'\\ud83d\\ude00x'}", NULL, 1},
	{"{'id':{'prefix':['a\\u0000']}}", "{'id':'a\\u0000b'}", NULL, 1},
	{"{'id':{'prefix':['a\\u0000']}}", "{'id':'ab'}", NULL, 0},

	/* suffix */
	{"{'f':{'suffix':['.jpg']}}", "{'f':'a.jpg'}", NULL, 1},
	{"{'f':{'suffix':['.jpg']}}", "{'f':'a.JPG'}", NULL, 0},
	{"{'f':{'suffix':['.jpg']}}", "{'f':'jpg'}", NULL, 0},
	{"{'f':{'suffix':['.jpg']}}", "{'f':'.jpg'}", NULL, 1},
	{"{'f':{'suffix':['.jpg']}}", "{'f':'a.jpg.png'}", NULL, 0},
	{"{'f':{'suffix':['1']}}", "{'f':1}", NULL, 0},
	{"{'f':{'suffix':['e']}}", "{'f':true}", NULL, 0},
	{"{'f':{'suffix':['']}}", "{'f':'x'}", NULL, 1},
	{"{'f':{'suffix':'.png'}}", "{'f':'a.png'}", NULL, 1},
	{"{'f':{'suffix':['\\u00f6']}}", "{'f':'B\xc3\xb6'}", NULL, 1},
	{"{'f':{'suffix':['.png'],'prefix':['img_']}}", "{'f':'img_a.jpg'}", NULL, 1},
	{"{'f':{'suffix':['.png'],'prefix':['img_']}}", "{'f':'doc.png'}", NULL, 1},
	{"{'f':{'suffix':['.png'],'prefix':['img_']}}", "{'f':'doc.jpg'}", NULL, 0},

	/* exists */
	{"{'name':{'exists':true}}", "{'name':'x'}", NULL, 1},
	{"{'name':{'exists':true}}", "{'name':null}", NULL, 1},
	{"{'name':{'exists':true}}", "{'name':false}", NULL, 1},
	{"{'name':{'exists':true}}", "{}", NULL, 0},
	{"{'name':{'exists':false}}", "{}", NULL, 1},
	{"{'name':{'exists':false}}", "{'name':null}", NULL, 0},
	{"{'name':{'exists':false}}", "{'name':'x'}", NULL, 0},
	{"{'name':{'exists':false}}", "{'Name':1}", NULL, 1},
	{"{'new_image':{'name':{'exists':true}}}", "{'new_image':{'name':null}}", NULL, 1},
	{"{'new_image':{'name':{'exists':true}}}", "{'new_image':{}}", NULL, 0},
	{"{'new_image':{'name':{'exists':true}}}", "{}", NULL, 0},
	{"{'new_image':{'name':{'exists':true}}}", "{'new_image':null}", NULL, 0},
	{"{'new_image':{'name':{'exists':true}}}", "{'new_image':[{'name':1}]}", NULL, 0},
	{"{'new_image':{'name':{'exists':false}}}", "{}", NULL, 1},
	{"{'new_image':{'name':{'exists':false}}}", "{'new_image':{}}", NULL, 1},
	{"{'new_image':{'name':{'exists':false}}}", "{'new_image':{'name':1}}", NULL, 0},
	{"{'new_image':{'name':{'exists':false}}}", "{'new_image':{'name':null}}", NULL, 0},
	{"{'new_image':{'name':{'exists':false}}}", "{'new_image':null}", NULL, 1},
	{"{'new_image':{'name':{'exists':false}}}", "{'new_image':[{'name':1}]}", NULL, 1},
	{"{'new_image':{'name':{'exists':false}}}", "{'new_image':'str'}", NULL, 1},
	{"{'new_image':{'name':{'exists':false}}}", "{'new_image':7}", NULL, 1},
	{"{'new_image':{'exists':true}}", "{'new_image':{}}", NULL, 1},
	{"{'new_image':{'exists':true}}", "{'new_image':[]}", NULL, 1},
	{"{'new_image':{'exists':false}}", "{'new_image':{}}", NULL, 0},
	{"{'a':{'b':{'c':{'d':{'exists':false}}}}}", "{'a':{'b':{}}}", NULL, 1},
	{"{'a':{'b':{'c':{'d':{'exists':false}}}}}", "{'a':{'b':{'c':{'d':0}}}}", NULL, 0},
	{"{'a':{'b':{'c':{'exists':true}}}}", "{'a':{'b':{'c':false}}}", NULL, 1},
	{"{'a':{'b':{'c':{'exists':true}}}}", "{'a':{'b':5}}", NULL, 0},
	{"{'name':{'exists':false,'prefix':['12']}}", "{}", NULL, 1},
	{"{'name':{'exists':false,'prefix':['12']}}", "{'name':'123'}", NULL, 1},
	{"{'name':{'exists':false,'prefix':['12']}}", "{'name':'23'}", NULL, 0},
	{"{'name':{'exists':false,'prefix':['12']}}", "{'name':123}", NULL, 0},
	{"{'name':{'exists':true,'prefix':['12']}}", "{'name':5}", NULL, 1},
	{"{'name':{'exists':false,'equals':[null]}}", "{'name':null}", NULL, 1},

	/* nesting, siblings, extra fields */
	{"{'a':{'b':['x']}}", "{'a':{'b':'x'}}", NULL, 1},
	{"{'a':{'b':['x']}}", "{'a':{'b':'y'}}", NULL, 0},
	{"{'a':{'b':['x']}}", "{'a':{'c':'x'}}", NULL, 0},
	{"{'a':{'b':['x']}}", "{'a':'x'}", NULL, 0},
	{"{'a':{'b':['x']}}", "{'a':[{'b':'x'}]}", NULL, 0},
	{"{'a':{'b':['x']}}", "{'a':null}", NULL, 0},
	{"{'a':{'b':['x']}}", "{'b':'x'}", NULL, 0},
	{"{'a':{'b':{'c':[1]}}}", "{'a':{'b':{'c':1,'d':2},'e':3},'f':4}", NULL, 1},
	{"{'a.b':['x']}", "{'a':{'b':'x'}}", NULL, 0},
	{"{'a.b':['x']}", "{'a.b':'x'}", NULL, 1},
	{"{'a':['1'],'b':['2']}", "{'a':'1','b':'2'}", NULL, 1},
	{"{'a':['1'],'b':['2']}", "{'a':'1','b':'3'}", NULL, 0},
	{"{'a':['1'],'b':['2']}", "{'a':'1'}", NULL, 0},
	{"{'a':['1'],'b':['2']}", "{'b':'2','a':'1','c':'3'}", NULL, 1},
	{"{'x':{'a':['1'],'b':{'exists':false}}}", "{'x':{'a':'1'}}", NULL, 1},
	{"{'x':{'a':['1'],'b':{'exists':false}}}", "{'x':{'a':'1','b':0}}", NULL, 0},
	{"{}", "{}", NULL, 1},
	{"{}", "{'a':1,'b':[1,2],'c':{'d':null}}", NULL, 1},
	{"{'tags':['a']}", "{'tags':['a']}", NULL, 0},
	{"{'tags':['a']}", "{'tags':'a'}", NULL, 1},
	{"{'tags':{'exists':true}}", "{'tags':['a']}", NULL, 1},
	{"{'tags':{'prefix':['a']}}", "{'tags':['abc']}", NULL, 0},
	{"{'a':{'b':{'c':{'d':{'e':{'f':['deep']}}}}}}", "{'a':{'b':{'c':{'d':{'e':{'f':'deep'}}}}}}", NULL, 1},
	{"{'a':{'b':{'c':{'d':{'e':{'f':['deep']}}}}}}", "{'a':{'b':{'c':{'d':{'e':[{'f':'deep'}]}}}}}", NULL, 0},

	/* numeric comparisons */
	{"{'age':{'gt':18}}", "{'age':19}", NULL, 1},
	{"{'age':{'gt':18}}", "{'age':18}", NULL, 0},
	{"{'age':{'gte':18}}", "{'age':18}", NULL, 1},
	{"{'age':{'gte':18}}", "{'age':17}", NULL, 0},
	{"{'age':{'lt':18}}", "{'age':17.9}", NULL, 1},
	{"{'age':{'lt':18}}", "{'age':18}", NULL, 0},
	{"{'age':{'lte':18}}", "{'age':18.0}", NULL, 1},
	{"{'age':{'lte':18}}", "{'age':18.000001}", NULL, 0},
	{"{'age':{'gt':18}}", "{'age':'19'}", NULL, 0},
	{"{'age':{'gt':0}}", "{'age':true}", NULL, 0},
	{"{'age':{'lt':1}}", "{'age':false}", NULL, 0},
	{"{'age':{'gt':-1}}", "{'age':null}", NULL, 0},
	{"{'age':{'gt':-1}}", "{}", NULL, 0},
	{"{'age':{'gt':-1}}", "{'age':[5]}", NULL, 0},
	{"{'age':{'gt':-1}}", "{'age':{'v':5}}", NULL, 0},
	{"{'price':{'lte':100.5}}", "{'price':100.5}", NULL, 1},
	{"{'price':{'lte':100.5}}", "{'price':101}", NULL, 0},
	{"{'price':{'lt':100.5}}", "{'price':100}", NULL, 1},
	{"{'price':{'gt':100.5}}", "{'price':100}", NULL, 0},
	{"{'n':{'gt':9007199254740992}}", "{'n':9007199254740993}", NULL, 1},
	{"{'n':{'gt':9007199254740992.0}}", "{'n':9007199254740993}", NULL, 1},
	{"{'n':{'lt':9007199254740993}}", "{'n':9007199254740992.0}", NULL, 1},
	{"{'n':{'lt':9223372036854775807}}", "{'n':9223372036854775806}", NULL, 1},
	{"{'n':{'gt':9223372036854775806}}", "{'n':9223372036854775807}", NULL, 1},
	{"{'n':{'lt':9223372036854775807.0}}", "{'n':9223372036854775807}", NULL, 1},
	{"{'n':{'lt':1e300}}", "{'n':9223372036854775807}", NULL, 1},
	{"{'n':{'gt':-1e300}}", "{'n':-9223372036854775808}", NULL, 1},
	{"{'n':{'gt':0.5}}", "{'n':1}", NULL, 1},
	{"{'n':{'lt':0.5}}", "{'n':0}", NULL, 1},
	{"{'n':{'gt':-0.5}}", "{'n':-1}", NULL, 0},
	{"{'n':{'lt':-0.5}}", "{'n':-1}", NULL, 1},
	{"{'n':{'gt':[100,10]}}", "{'n':50}", NULL, 1},
	{"{'n':{'gt':[100,200]}}", "{'n':50}", NULL, 0},
	{"{'n':{'gt':100,'lt':10}}", "{'n':50}", NULL, 0},
	{"{'n':{'gt':100,'lt':10}}", "{'n':5}", NULL, 1},
	{"{'n':{'gt':100,'lt':10}}", "{'n':500}", NULL, 1},
	{"{'n':{'gte':-5}}", "{'n':-5.0}", NULL, 1},
	{"{'n':{'lt':10}}", "{'n':'5'}", NULL, 0},
	{"{'n':{'gt':1}}", "{'n':1e308}", NULL, 1},
	{"{'n':{'gt':1}}", "{'n':18446744073709551616}", NULL, 1},
	{"{'n':{'lt':1}}", "{'n':-18446744073709551616}", NULL, 1},
	{"{'n':{'gte':0}}", "{'n':-0.0}", NULL, 1},
	{"{'n':{'lte':0}}", "{'n':4.9e-324}", NULL, 0},
	{"{'n':{'gt':0}}", "{'n':4.9e-324}", NULL, 1},
	{"{'n':{'gt':0}}", "{'n':'2026-09-13T12:00:01Z'}", NULL, 0},

	/* temporal comparisons (now = 2026-09-13T12:00:00Z unless given) */
	{"{'t':{'gt':'now()-5m'}}", "{'t':'2026-09-13T11:56:00Z'}", NULL, 1},
	{"{'t':{'gt':'now()-5m'}}", "{'t':'2026-09-13T11:54:00Z'}", NULL, 0},
	{"{'t':{'gt':'now()-5m'}}", "{'t':'2026-09-13T11:55:00Z'}", NULL, 0},
	{"{'t':{'gte':'now()-5m'}}", "{'t':'2026-09-13T11:55:00Z'}", NULL, 1},
	{"{'t':{'gt':'now()-5m'}}", "{'t':'2026-09-13T13:56:00+02:00'}", NULL, 1},
	{"{'t':{'gt':'now()-5m'}}", "{'t':'2026-09-13T07:56:00-04:00'}", NULL, 1},
	{"{'t':{'gt':'now()-5m'}}", "{'t':'2026-09-13T11:56:00+02:00'}", NULL, 0},
	{"{'t':{'gt':'now()-5m'}}", "{'t':'2026-09-13T11:56:00-00:00'}", NULL, 1},
	{"{'t':{'gt':'now()-5m'}}", "{'t':'2026-09-13T17:26:00+05:30'}", NULL, 1},
	{"{'t':{'gt':'now()-5m'}}", "{'t':'2026-09-13T17:24:00+05:30'}", NULL, 0},
	{"{'t':{'gt':'now()'}}", "{'t':'2026-09-13T12:00:00.000000001Z'}", NULL, 1},
	{"{'t':{'gt':'now()'}}", "{'t':'2026-09-13T12:00:00.000000000Z'}", NULL, 0},
	{"{'t':{'gte':'now()'}}", "{'t':'2026-09-13T12:00:00.0Z'}", NULL, 1},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-09-13T11:59:59.999999999Z'}", NULL, 1},
	{"{'t':{'gt':'now()'}}", "{'t':'2026-09-13T12:00:00.0000000009Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-09-13T11:59:59,5Z'}", NULL, 1},
	{"{'t':{'gte':'now()+0s'}}", "{'t':'2026-09-13T12:00:00Z'}", NULL, 1},
	{"{'t':{'gt':'now()+0s'}}", "{'t':'2026-09-13T12:00:00Z'}", NULL, 0},
	{"{'t':{'lte':'now()-0s'}}", "{'t':'2026-09-13T12:00:00Z'}", NULL, 1},
	{"{'t':{'gt':'now()-1h30m'}}", "{'t':'2026-09-13T10:31:00Z'}", NULL, 1},
	{"{'t':{'gt':'now()-1h30m'}}", "{'t':'2026-09-13T10:29:00Z'}", NULL, 0},
	{"{'t':{'lt':'now()+24h'}}", "{'t':'2026-09-14T11:59:59Z'}", NULL, 1},
	{"{'t':{'lt':'now()+24h'}}", "{'t':'2026-09-14T12:00:01Z'}", NULL, 0},
	{"{'exp':{'gt':'now()+10m'}}", "{'exp':'2026-09-13T12:10:01Z'}", NULL, 1},
	{"{'exp':{'gt':'now()+10m'}}", "{'exp':'2026-09-13T12:09:59Z'}", NULL, 0},
	{"{'t':{'gt':'now()-1.5h'}}", "{'t':'2026-09-13T10:31:00Z'}", NULL, 1},
	{"{'t':{'gt':'now()-300ms'}}", "{'t':'2026-09-13T11:59:59.8Z'}", NULL, 1},
	{"{'t':{'gt':'now()-300ms'}}", "{'t':'2026-09-13T11:59:59.7Z'}", NULL, 0},
	{"{'t':{'gt':'now()-1\xc2\xb5s'}}", "{'t':'2026-09-13T11:59:59.9999995Z'}", NULL, 1},
	{"{'t':{'gt':'now()-5m'}}", "{'t':'2026-09-13T11:56:00Z'}", "2026-09-13T12:10:00Z", 0},
	{"{'t':{'gt':'now()-5m'}}", "{'t':'2026-09-13T11:56:00Z'}", "2026-09-13T14:00:00+02:00", 1},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-02-30T00:00:00Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2024-02-29T00:00:00Z'}", NULL, 1},
	{"{'t':{'lt':'now()'}}", "{'t':'2025-02-29T00:00:00Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'1900-02-29T00:00:00Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2000-02-29T00:00:00Z'}", NULL, 1},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-04-31T00:00:00Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-13-01T00:00:00Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-00-01T00:00:00Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-00T00:00:00Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01T24:00:00Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01T00:60:00Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-06-30T23:59:60Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01T00:00:00'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01t00:00:00Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01T00:00:00z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01 00:00:00Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':''}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':1700000000}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':null}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':{'a':1}}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':['2026-01-01T00:00:00Z']}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':true}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01T9:00:00Z'}", NULL, 1},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01T09:0:00Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-1-01T09:00:00Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01T00:00:00+24:00'}", NULL, 1},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01T00:00:00+0200'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01T00:00:00+25:00'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01T00:00:00+02'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01T00:00:00Z '}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':' 2026-01-01T00:00:00Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01T00:00:00.Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'12026-01-01T00:00:00Z'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01T00:00:00ZZ'}", NULL, 0},
	{"{'t':{'lt':'now()'}}", "{'t':'2026-01-01T00:00:00\\u0000Z'}", NULL, 0},
	{"{'t':{'gt':'now()'}}", "{'t':'9999-12-31T23:59:59Z'}", NULL, 1},
	{"{'t':{'lt':'now()'}}", "{'t':'0000-01-01T00:00:00Z'}", NULL, 1},
	{"{'t':{'gt':[100,'now()']}}", "{'t':101}", NULL, 1},
	{"{'t':{'gt':[100,'now()']}}", "{'t':'2026-09-13T12:00:01Z'}", NULL, 1},
	{"{'t':{'gt':[100,'now()']}}", "{'t':'2026-09-13T11:00:00Z'}", NULL, 0},
	{"{'t':{'gt':[100,'now()']}}", "{'t':99}", NULL, 0},
	{"{'t':{'gte':'now()-1h','lt':'now()'}}", "{'t':'2026-09-13T13:00:00Z'}", NULL, 1},
	{"{'t':{'gte':'now()-1h','lt':'now()'}}", "{'t':'not a time'}", NULL, 0},
	{"{'t':{'lt':'now()+2562047h'}}", "{'t':'2026-01-01T00:00:00Z'}", NULL, 1},
	{"{'t':{'gt':'now()-2562047h'}}", "{'t':'1900-01-01T00:00:00Z'}", NULL, 1},
	{"{'t':{'gt':'now()-2562047h'}}", "{'t':'1700-01-01T00:00:00Z'}", NULL, 0},
	{"{'event_name':['INSERT'],'new_image':{'created_at':{'gt':'now()-5m'}}}", "{'event_name':'INSERT','new_image':{'created_at':'2026-09-13T11:58:00Z'}}", NULL, 1},
	{"{'event_name':['INSERT'],'new_image':{'created_at':{'gt':'now()-5m'}}}", "{'event_name':'MODIFY','new_image':{'created_at':'2026-09-13T11:58:00Z'}}", NULL, 0},
	{"{'event_name':['INSERT'],'new_image':{'created_at':{'gt':'now()-5m'}}}", "{'event_name':'INSERT','new_image':{'created_at':'2026-09-13T11:50:00Z'}}", NULL, 0},
	{"{'t':{'exists':false,'gt':'now()'}}", "{}", NULL, 1},
	{"{'t':{'exists':false,'gt':'now()'}}", "{'t':'2020-01-01T00:00:00Z'}", NULL, 0},
};
/* clang-format on */

/* Checks one row: pattern_match, pattern_match_json and a one-rule set
 * all give want. */
static void check_row(size_t i, const char *pattern, const char *event, const char *when,
		      enum pattern_arrays arrays, int want)
{
	json_t *pj = pjson(pattern);
	struct event *ev = pevent(event);
	struct pattern *p = NULL;
	struct buf errs;
	buf_init(&errs, 4096);
	if (!pj || !ev || pattern_compile_arrays(pj, "events[0].pattern", arrays, &p, &errs) != 0) {
		T_FAIL_("row %zu: setup failed: %s", i, errs.data ? errs.data : "");
	} else {
		int64_t now = ns_of(when ? when : NOW);
		bool got = pattern_match(p, ev, now);
		if (got != (want != 0))
			T_FAIL_("row %zu: %s vs %s (match_arrays: %s): got %d, want %d", i, pattern,
				event, arrays == PATTERN_ARRAYS_ELEMENTS ? "elements" : "values",
				got, want);
		/* the jansson entry point agrees */
		char *t = unquote(event);
		json_t *ej = json_loads(t, JSON_ALLOW_NUL, NULL);
		if (ej && pattern_match_json(p, ej, now) != got)
			T_FAIL_("row %zu: pattern_match_json disagrees", i);
		json_decref(ej);
		free(t);
		/* and so does a one-rule set */
		const struct pattern *ps[] = {p};
		struct pattern_set *set = pattern_set_new(ps, 1);
		uint32_t ids[1];
		if (pattern_set_match(set, ev, now, ids) != (got ? 1u : 0u))
			T_FAIL_("row %zu: pattern_set_match disagrees", i);
		pattern_set_free(set);
	}
	buf_free(&errs);
	pattern_free(p);
	event_free(ev);
	json_decref(pj);
}

TEST(match_table)
{
	CHECK(ARRAY_LEN(match_rows) >= 150);
	for (size_t i = 0; i < ARRAY_LEN(match_rows); i++) {
		const struct match_row *r = &match_rows[i];
		check_row(i, r->pattern, r->event, r->now, PATTERN_ARRAYS_VALUES, r->want);
	}
}

/* The operators EventBridge users know, $or and match_arrays. Each row is
 * checked under match_arrays: values (want) and elements (want_elements):
 * the two differ only where the event holds an array. Expectations follow
 * docs/template.md, which follows EventBridge's documented behaviour. */
struct op_row {
	const char *pattern, *event;
	int want, want_elements;
};

/* clang-format off */
static const struct op_row op_rows[] = {
	/* anything-but: values, type-preserving; a missing field never matches */
	{"{'s':{'anything-but':['a','b']}}", "{'s':'c'}", 1, 1},
	{"{'s':{'anything-but':['a','b']}}", "{'s':'a'}", 0, 0},
	{"{'s':{'anything-but':['a','b']}}", "{'s':'b'}", 0, 0},
	{"{'s':{'anything-but':['a','b']}}", "{}", 0, 0},
	{"{'s':{'anything-but':['a','b']}}", "{'s':null}", 1, 1},
	{"{'s':{'anything-but':['a','b']}}", "{'s':5}", 1, 1},
	{"{'s':{'anything-but':['a','b']}}", "{'s':'A'}", 1, 1},
	{"{'s':{'anything-but':['a','b']}}", "{'s':''}", 1, 1},
	{"{'s':{'anything-but':['a','b']}}", "{'s':{'x':1}}", 0, 0},
	{"{'s':{'anything-but':['a','b']}}", "{'s':['c']}", 0, 1},
	{"{'s':{'anything-but':['a','b']}}", "{'s':['a','b']}", 0, 0},
	{"{'s':{'anything-but':['a','b']}}", "{'s':['a','z']}", 0, 1},
	{"{'s':{'anything-but':['a','b']}}", "{'s':[]}", 0, 0},
	{"{'s':{'anything-but':'initializing'}}", "{'s':'running'}", 1, 1},
	{"{'s':{'anything-but':'initializing'}}", "{'s':'initializing'}", 0, 0},
	{"{'n':{'anything-but':[100,200,300]}}", "{'n':200}", 0, 0},
	{"{'n':{'anything-but':[100,200,300]}}", "{'n':200.0}", 0, 0},
	{"{'n':{'anything-but':[100,200,300]}}", "{'n':2e2}", 0, 0},
	{"{'n':{'anything-but':[100,200,300]}}", "{'n':'200'}", 1, 1},
	{"{'n':{'anything-but':[100,200,300]}}", "{'n':201}", 1, 1},
	{"{'n':{'anything-but':[0]}}", "{'n':-0}", 0, 0},
	{"{'n':{'anything-but':[0]}}", "{'n':-0.0}", 0, 0},
	{"{'n':{'anything-but':123}}", "{'n':123.5}", 1, 1},
	{"{'x':{'anything-but':[null]}}", "{'x':null}", 0, 0},
	{"{'x':{'anything-but':[null]}}", "{'x':'null'}", 1, 1},
	{"{'x':{'anything-but':[null]}}", "{}", 0, 0},
	{"{'b':{'anything-but':[true]}}", "{'b':false}", 1, 1},
	{"{'b':{'anything-but':[true]}}", "{'b':true}", 0, 0},
	{"{'b':{'anything-but':[true]}}", "{'b':1}", 1, 1},
	/* anything-but: string operators; a non-string never matches */
	{"{'r':{'anything-but':{'prefix':'us-'}}}", "{'r':'eu-west-1'}", 1, 1},
	{"{'r':{'anything-but':{'prefix':'us-'}}}", "{'r':'us-east-1'}", 0, 0},
	{"{'r':{'anything-but':{'prefix':'us-'}}}", "{'r':'us-'}", 0, 0},
	{"{'r':{'anything-but':{'prefix':'us-'}}}", "{'r':'US-east-1'}", 1, 1},
	{"{'r':{'anything-but':{'prefix':'us-'}}}", "{'r':''}", 1, 1},
	{"{'r':{'anything-but':{'prefix':'us-'}}}", "{'r':5}", 0, 0},
	{"{'r':{'anything-but':{'prefix':'us-'}}}", "{'r':null}", 0, 0},
	{"{'r':{'anything-but':{'prefix':'us-'}}}", "{}", 0, 0},
	{"{'r':{'anything-but':{'prefix':['us-','eu-']}}}", "{'r':'eu-1'}", 0, 0},
	{"{'r':{'anything-but':{'prefix':['us-','eu-']}}}", "{'r':'ap-1'}", 1, 1},
	{"{'r':{'anything-but':{'prefix':''}}}", "{'r':'x'}", 0, 0},
	{"{'f':{'anything-but':{'suffix':'.png'}}}", "{'f':'a.png'}", 0, 0},
	{"{'f':{'anything-but':{'suffix':'.png'}}}", "{'f':'a.jpg'}", 1, 1},
	{"{'f':{'anything-but':{'suffix':'.png'}}}", "{'f':['a.png','b.jpg']}", 0, 1},
	{"{'s':{'anything-but':{'equals-ignore-case':'initializing'}}}", "{'s':'INITIALIZING'}", 0, 0},
	{"{'s':{'anything-but':{'equals-ignore-case':'initializing'}}}", "{'s':'Initializing'}", 0, 0},
	{"{'s':{'anything-but':{'equals-ignore-case':'initializing'}}}", "{'s':'running'}", 1, 1},
	{"{'s':{'anything-but':{'equals-ignore-case':['a','b']}}}", "{'s':'B'}", 0, 0},
	{"{'s':{'anything-but':{'equals-ignore-case':['a','b']}}}", "{'s':7}", 0, 0},
	{"{'p':{'anything-but':{'wildcard':'*/lib/*'}}}", "{'p':'/usr/lib/x.so'}", 0, 0},
	{"{'p':{'anything-but':{'wildcard':'*/lib/*'}}}", "{'p':'/usr/bin/x'}", 1, 1},
	{"{'p':{'anything-but':{'wildcard':['*.a','*.so']}}}", "{'p':'x.so'}", 0, 0},
	{"{'p':{'anything-but':{'wildcard':['*.a','*.so']}}}", "{'p':'x.o'}", 1, 1},

	/* equals-ignore-case: Unicode simple case folding, strings only */
	{"{'n':{'equals-ignore-case':'alice'}}", "{'n':'Alice'}", 1, 1},
	{"{'n':{'equals-ignore-case':'alice'}}", "{'n':'ALICE'}", 1, 1},
	{"{'n':{'equals-ignore-case':'alice'}}", "{'n':'alice'}", 1, 1},
	{"{'n':{'equals-ignore-case':'alice'}}", "{'n':'alicia'}", 0, 0},
	{"{'n':{'equals-ignore-case':'alice'}}", "{'n':'alice '}", 0, 0},
	{"{'n':{'equals-ignore-case':'alice'}}", "{'n':'alic'}", 0, 0},
	{"{'n':{'equals-ignore-case':'alice'}}", "{}", 0, 0},
	{"{'n':{'equals-ignore-case':'5'}}", "{'n':5}", 0, 0},
	{"{'n':{'equals-ignore-case':'true'}}", "{'n':true}", 0, 0},
	{"{'n':{'equals-ignore-case':''}}", "{'n':''}", 1, 1},
	{"{'n':{'equals-ignore-case':''}}", "{'n':'a'}", 0, 0},
	{"{'n':{'equals-ignore-case':['a','b']}}", "{'n':'B'}", 1, 1},
	{"{'n':{'equals-ignore-case':'HeLLo WoRLD'}}", "{'n':'hello world'}", 1, 1},
	{"{'n':{'equals-ignore-case':'caf\\u00e9'}}", "{'n':'CAF\\u00c9'}", 1, 1},
	{"{'n':{'equals-ignore-case':'caf\\u00e9'}}", "{'n':'CAFE\\u0301'}", 0, 0},
	/* final sigma, sigma and capital sigma fold alike */
	{"{'n':{'equals-ignore-case':'\\u03c3\\u03af\\u03c3\\u03c5\\u03c6\\u03bf\\u03c2'}}", "{'n':'\\u03a3\\u038a\\u03a3\\u03a5\\u03a6\\u039f\\u03a3'}", 1, 1},
	/* DZ digraphs: all three cases fold to U+01C6 */
	{"{'n':{'equals-ignore-case':'\\u01c4'}}", "{'n':'\\u01c5'}", 1, 1},
	{"{'n':{'equals-ignore-case':'\\u01c4'}}", "{'n':'\\u01c6'}", 1, 1},
	/* KELVIN SIGN folds to k */
	{"{'n':{'equals-ignore-case':'k'}}", "{'n':'\\u212a'}", 1, 1},
	/* simple, not full, folding: sharp s is not ss, U+0130 is not i, the ff ligature is not ff */
	{"{'n':{'equals-ignore-case':'strasse'}}", "{'n':'stra\\u00dfe'}", 0, 0},
	{"{'n':{'equals-ignore-case':'\\u1e9e'}}", "{'n':'\\u00df'}", 1, 1},
	{"{'n':{'equals-ignore-case':'i'}}", "{'n':'\\u0130'}", 0, 0},
	{"{'n':{'equals-ignore-case':'ff'}}", "{'n':'\\ufb00'}", 0, 0},
	/* three bytes: fullwidth letters fold to fullwidth, not to ASCII */
	{"{'n':{'equals-ignore-case':'\\uff41\\uff42'}}", "{'n':'\\uff21\\uff22'}", 1, 1},
	{"{'n':{'equals-ignore-case':'ab'}}", "{'n':'\\uff21\\uff22'}", 0, 0},
	/* outside the BMP: Deseret capital and small letter long i */
	{"{'n':{'equals-ignore-case':'\\ud801\\udc00'}}", "{'n':'\\ud801\\udc28'}", 1, 1},
	{"{'n':{'equals-ignore-case':'a\\u0000b'}}", "{'n':'A\\u0000B'}", 1, 1},
	{"{'n':{'equals-ignore-case':'a\\u0000b'}}", "{'n':'A'}", 0, 0},
	{"{'n':{'equals-ignore-case':'x'}}", "{'n':['y','X']}", 0, 1},

	/* wildcard: * any run (also none), \\* a star, \\\\ a backslash */
	{"{'f':{'wildcard':'*.png'}}", "{'f':'a.png'}", 1, 1},
	{"{'f':{'wildcard':'*.png'}}", "{'f':'.png'}", 1, 1},
	{"{'f':{'wildcard':'*.png'}}", "{'f':'a.PNG'}", 0, 0},
	{"{'f':{'wildcard':'*.png'}}", "{'f':'a.png.x'}", 0, 0},
	{"{'f':{'wildcard':'*.png'}}", "{'f':'png'}", 0, 0},
	{"{'f':{'wildcard':'dir/*/x*'}}", "{'f':'dir/a/xyz'}", 1, 1},
	{"{'f':{'wildcard':'dir/*/x*'}}", "{'f':'dir//x'}", 1, 1},
	{"{'f':{'wildcard':'dir/*/x*'}}", "{'f':'dir/a/b/x'}", 1, 1},
	{"{'f':{'wildcard':'dir/*/x*'}}", "{'f':'dir/a/y'}", 0, 0},
	{"{'f':{'wildcard':'dir/*/x*'}}", "{'f':'dir/x'}", 0, 0},
	{"{'f':{'wildcard':'a*b*c'}}", "{'f':'abc'}", 1, 1},
	{"{'f':{'wildcard':'a*b*c'}}", "{'f':'aXbYc'}", 1, 1},
	{"{'f':{'wildcard':'a*b*c'}}", "{'f':'acb'}", 0, 0},
	{"{'f':{'wildcard':'a*b*c'}}", "{'f':'abcabc'}", 1, 1},
	{"{'f':{'wildcard':'a*b*c'}}", "{'f':'abcab'}", 0, 0},
	{"{'f':{'wildcard':'*a*a*a*'}}", "{'f':'aaa'}", 1, 1},
	{"{'f':{'wildcard':'*a*a*a*'}}", "{'f':'aa'}", 0, 0},
	{"{'f':{'wildcard':'*a*a*a*'}}", "{'f':'babab'}", 0, 0},
	{"{'f':{'wildcard':'*a*a*a*'}}", "{'f':'bababab'}", 1, 1},
	{"{'f':{'wildcard':'ab*ba'}}", "{'f':'aba'}", 0, 0},
	{"{'f':{'wildcard':'ab*ba'}}", "{'f':'abba'}", 1, 1},
	{"{'f':{'wildcard':'*'}}", "{'f':''}", 1, 1},
	{"{'f':{'wildcard':'*'}}", "{'f':'x'}", 1, 1},
	{"{'f':{'wildcard':'*'}}", "{'f':5}", 0, 0},
	{"{'f':{'wildcard':'*'}}", "{'f':null}", 0, 0},
	{"{'f':{'wildcard':'*'}}", "{}", 0, 0},
	{"{'f':{'wildcard':'abc'}}", "{'f':'abc'}", 1, 1},
	{"{'f':{'wildcard':'abc'}}", "{'f':'abcd'}", 0, 0},
	{"{'f':{'wildcard':''}}", "{'f':''}", 1, 1},
	{"{'f':{'wildcard':''}}", "{'f':'a'}", 0, 0},
	{"{'f':{'wildcard':'a\\\\*b'}}", "{'f':'a*b'}", 1, 1},
	{"{'f':{'wildcard':'a\\\\*b'}}", "{'f':'axb'}", 0, 0},
	{"{'f':{'wildcard':'a\\\\\\\\b'}}", "{'f':'a\\\\b'}", 1, 1},
	{"{'f':{'wildcard':'a\\\\\\\\*'}}", "{'f':'a\\\\xyz'}", 1, 1},
	{"{'f':{'wildcard':'*\\u00e9'}}", "{'f':'caf\\u00e9'}", 1, 1},
	{"{'f':{'wildcard':'*.png'}}", "{'f':['a.jpg','b.png']}", 0, 1},

	/* cidr: IPv4 and IPv6 (compressed, full, mapped forms) */
	{"{'ip':{'cidr':'10.0.0.0/24'}}", "{'ip':'10.0.0.255'}", 1, 1},
	{"{'ip':{'cidr':'10.0.0.0/24'}}", "{'ip':'10.0.0.0'}", 1, 1},
	{"{'ip':{'cidr':'10.0.0.0/24'}}", "{'ip':'10.0.1.0'}", 0, 0},
	{"{'ip':{'cidr':'10.0.0.0/24'}}", "{'ip':'10.0.0.1 '}", 0, 0},
	{"{'ip':{'cidr':'10.0.0.0/24'}}", "{'ip':'010.0.0.1'}", 0, 0},
	{"{'ip':{'cidr':'10.0.0.0/24'}}", "{'ip':'10.0.0.1/32'}", 0, 0},
	{"{'ip':{'cidr':'10.0.0.0/24'}}", "{'ip':'not an address'}", 0, 0},
	{"{'ip':{'cidr':'10.0.0.0/24'}}", "{'ip':''}", 0, 0},
	{"{'ip':{'cidr':'10.0.0.0/24'}}", "{'ip':167772161}", 0, 0},
	{"{'ip':{'cidr':'10.0.0.0/24'}}", "{}", 0, 0},
	{"{'ip':{'cidr':'10.0.0.0/24'}}", "{'ip':'10.0.0.1\\u0000'}", 0, 0},
	{"{'ip':{'cidr':'10.0.0.77/24'}}", "{'ip':'10.0.0.1'}", 1, 1},
	{"{'ip':{'cidr':'192.168.1.7/32'}}", "{'ip':'192.168.1.7'}", 1, 1},
	{"{'ip':{'cidr':'192.168.1.7/32'}}", "{'ip':'192.168.1.8'}", 0, 0},
	{"{'ip':{'cidr':'0.0.0.0/0'}}", "{'ip':'255.255.255.255'}", 1, 1},
	{"{'ip':{'cidr':'0.0.0.0/0'}}", "{'ip':'2001:db8::1'}", 0, 0},
	{"{'ip':{'cidr':'2001:db8::/32'}}", "{'ip':'2001:db8::1'}", 1, 1},
	{"{'ip':{'cidr':'2001:db8::/32'}}", "{'ip':'2001:DB8:0:0:0:0:0:1'}", 1, 1},
	{"{'ip':{'cidr':'2001:db8::/32'}}", "{'ip':'2001:0db8:ffff:ffff:ffff:ffff:ffff:ffff'}", 1, 1},
	{"{'ip':{'cidr':'2001:db8::/32'}}", "{'ip':'2001:db9::1'}", 0, 0},
	{"{'ip':{'cidr':'2001:db8::/32'}}", "{'ip':'10.0.0.1'}", 0, 0},
	{"{'ip':{'cidr':'2001:db8::/127'}}", "{'ip':'2001:db8::1'}", 1, 1},
	{"{'ip':{'cidr':'2001:db8::/127'}}", "{'ip':'2001:db8::2'}", 0, 0},
	{"{'ip':{'cidr':'fe80::/10'}}", "{'ip':'fe80::1'}", 1, 1},
	{"{'ip':{'cidr':'fe80::/10'}}", "{'ip':'febf::1'}", 1, 1},
	{"{'ip':{'cidr':'fe80::/10'}}", "{'ip':'fec0::1'}", 0, 0},
	{"{'ip':{'cidr':'fe80::/10'}}", "{'ip':'fe80::1%eth0'}", 0, 0},
	/* an IPv4 address and its IPv4-mapped IPv6 forms are one address */
	{"{'ip':{'cidr':'10.0.0.0/8'}}", "{'ip':'::ffff:10.1.2.3'}", 1, 1},
	{"{'ip':{'cidr':'10.0.0.0/8'}}", "{'ip':'::ffff:a01:203'}", 1, 1},
	{"{'ip':{'cidr':'10.0.0.0/8'}}", "{'ip':'::10.1.2.3'}", 0, 0},
	{"{'ip':{'cidr':'::ffff:0:0/96'}}", "{'ip':'10.1.2.3'}", 1, 1},
	{"{'ip':{'cidr':'::ffff:10.0.0.0/104'}}", "{'ip':'10.200.0.1'}", 1, 1},
	{"{'ip':{'cidr':'::/0'}}", "{'ip':'1.2.3.4'}", 1, 1},
	{"{'ip':{'cidr':['10.0.0.0/8','2001:db8::/32']}}", "{'ip':'2001:db8:1::'}", 1, 1},
	{"{'ip':{'cidr':'10.0.0.0/8'}}", "{'ip':['1.1.1.1','10.2.3.4']}", 0, 1},

	/* numeric: a range is a conjunction, a list of ranges a disjunction */
	{"{'c':{'numeric':['>',0,'<=',5]}}", "{'c':5}", 1, 1},
	{"{'c':{'numeric':['>',0,'<=',5]}}", "{'c':0}", 0, 0},
	{"{'c':{'numeric':['>',0,'<=',5]}}", "{'c':0.5}", 1, 1},
	{"{'c':{'numeric':['>',0,'<=',5]}}", "{'c':5.0}", 1, 1},
	{"{'c':{'numeric':['>',0,'<=',5]}}", "{'c':5.000001}", 0, 0},
	{"{'c':{'numeric':['>',0,'<=',5]}}", "{'c':-1}", 0, 0},
	{"{'c':{'numeric':['>',0,'<=',5]}}", "{'c':'3'}", 0, 0},
	{"{'c':{'numeric':['>',0,'<=',5]}}", "{'c':true}", 0, 0},
	{"{'c':{'numeric':['>',0,'<=',5]}}", "{'c':null}", 0, 0},
	{"{'c':{'numeric':['>',0,'<=',5]}}", "{}", 0, 0},
	{"{'c':{'numeric':['>',0,'<=',5]}}", "{'c':{'v':3}}", 0, 0},
	{"{'c':{'numeric':['>=',10,'<',20]}}", "{'c':10}", 1, 1},
	{"{'c':{'numeric':['>=',10,'<',20]}}", "{'c':20}", 0, 0},
	{"{'c':{'numeric':['>=',10,'<',20]}}", "{'c':19.999}", 1, 1},
	{"{'c':{'numeric':['=',5]}}", "{'c':5.0}", 1, 1},
	{"{'c':{'numeric':['=',5]}}", "{'c':50e-1}", 1, 1},
	{"{'c':{'numeric':['=',5]}}", "{'c':5.1}", 0, 0},
	{"{'c':{'numeric':['=',0]}}", "{'c':-0}", 1, 1},
	{"{'c':{'numeric':['=',0]}}", "{'c':-0.0}", 1, 1},
	{"{'c':{'numeric':['=',100]}}", "{'c':1E2}", 1, 1},
	{"{'c':{'numeric':['=',100]}}", "{'c':1e+2}", 1, 1},
	{"{'c':{'numeric':['<',1]}}", "{'c':1e-300}", 1, 1},
	{"{'c':{'numeric':['>',1e300]}}", "{'c':1e308}", 1, 1},
	{"{'c':{'numeric':['<',-1e300]}}", "{'c':-1e308}", 1, 1},
	{"{'c':{'numeric':['>',9223372036854775806]}}", "{'c':9223372036854775807}", 1, 1},
	{"{'c':{'numeric':['=',9007199254740993]}}", "{'c':9007199254740992}", 0, 0},
	{"{'c':{'numeric':['=',9007199254740993]}}", "{'c':9007199254740993}", 1, 1},
	{"{'c':{'numeric':['>',1]}}", "{'c':18446744073709551616}", 1, 1},
	{"{'c':{'numeric':['>=',-5e9,'<=',5e9]}}", "{'c':-5000000000}", 1, 1},
	{"{'c':{'numeric':['>',0,'<',0]}}", "{'c':0}", 0, 0},
	{"{'c':{'numeric':[['>',0,'<',1],['=',7]]}}", "{'c':7}", 1, 1},
	{"{'c':{'numeric':[['>',0,'<',1],['=',7]]}}", "{'c':0.5}", 1, 1},
	{"{'c':{'numeric':[['>',0,'<',1],['=',7]]}}", "{'c':3}", 0, 0},
	{"{'c':{'numeric':['>',5,'<',10]}}", "{'c':[1,20]}", 0, 0},
	{"{'c':{'numeric':['>',5,'<',10]}}", "{'c':[1,7]}", 0, 1},
	/* operators of one field stay alternatives, new ones included */
	{"{'c':{'numeric':['>',10],'prefix':'x'}}", "{'c':'xa'}", 1, 1},
	{"{'c':{'numeric':['>',10],'prefix':'x'}}", "{'c':11}", 1, 1},
	{"{'c':{'numeric':['>',10],'prefix':'x'}}", "{'c':5}", 0, 0},
	{"{'c':{'anything-but':['a'],'exists':false}}", "{}", 1, 1},
	{"{'c':{'anything-but':['a'],'equals':['a']}}", "{'c':'a'}", 1, 1},

	/* $or: at the top, beside fields, nested, inside a branch */
	{"{'$or':[{'a':[1]},{'b':[2]}]}", "{'a':1}", 1, 1},
	{"{'$or':[{'a':[1]},{'b':[2]}]}", "{'b':2}", 1, 1},
	{"{'$or':[{'a':[1]},{'b':[2]}]}", "{'a':2,'b':1}", 0, 0},
	{"{'$or':[{'a':[1]},{'b':[2]}]}", "{}", 0, 0},
	{"{'c':['x'],'$or':[{'a':[1]},{'b':[2]}]}", "{'c':'x','b':2}", 1, 1},
	{"{'c':['x'],'$or':[{'a':[1]},{'b':[2]}]}", "{'b':2}", 0, 0},
	{"{'c':['x'],'$or':[{'a':[1]},{'b':[2]}]}", "{'c':'x'}", 0, 0},
	{"{'d':{'$or':[{'a':[1]},{'b':{'exists':false}}]}}", "{'d':{'a':1,'b':1}}", 1, 1},
	{"{'d':{'$or':[{'a':[1]},{'b':{'exists':false}}]}}", "{'d':{'b':1}}", 0, 0},
	{"{'d':{'$or':[{'a':[1]},{'b':{'exists':false}}]}}", "{'d':{}}", 1, 1},
	{"{'d':{'$or':[{'a':[1]},{'b':{'exists':false}}]}}", "{}", 1, 1},
	{"{'$or':[{'a':[1]},{'$or':[{'b':[2]},{'c':[3]}]}]}", "{'c':3}", 1, 1},
	{"{'$or':[{'a':[1]},{'$or':[{'b':[2]},{'c':[3]}]}]}", "{'d':4}", 0, 0},
	{"{'$or':[{'n':{'numeric':['>',10]}},{'n':{'numeric':['<',0]}}]}", "{'n':-1}", 1, 1},
	{"{'$or':[{'n':{'numeric':['>',10]}},{'n':{'numeric':['<',0]}}]}", "{'n':5}", 0, 0},
	{"{'$or':[{'a':['x'],'b':['y']},{'c':{'exists':true}}]}", "{'a':'x'}", 0, 0},
	{"{'$or':[{'a':['x'],'b':['y']},{'c':{'exists':true}}]}", "{'a':'x','b':'y'}", 1, 1},
	{"{'$or':[{'a':['x']},{'a':{'prefix':'y'}}]}", "{'a':['x']}", 0, 1},

	/* EventBridge's own documented examples, in Relay's form */
	{"{'x-limit':{'numeric':['=',3.018e2]}}", "{'x-limit':301.8}", 1, 1},
	{"{'x-limit':{'numeric':['=',3.018e2]}}", "{'x-limit':301.81}", 0, 0},
	{"{'$or':[{'c-count':{'numeric':['>',0,'<=',5]}},{'d-count':{'numeric':['<',10]}},{'x-limit':{'numeric':['=',3.018e2]}}]}", "{'c-count':7,'d-count':9}", 1, 1},
	{"{'$or':[{'c-count':{'numeric':['>',0,'<=',5]}},{'d-count':{'numeric':['<',10]}},{'x-limit':{'numeric':['=',3.018e2]}}]}", "{'c-count':7,'d-count':10,'x-limit':300}", 0, 0},
	{"{'EventBusArn':{'wildcard':'arn:aws:events:us-east-1:*:event-bus/*'}}", "{'EventBusArn':'arn:aws:events:us-east-1:123456789012:event-bus/default'}", 1, 1},
	{"{'EventBusArn':{'wildcard':'arn:aws:events:us-east-1:*:event-bus/*'}}", "{'EventBusArn':'arn:aws:events:us-west-2:123456789012:event-bus/default'}", 0, 0},
	{"{'detail':{'sourceIPAddress':{'cidr':'10.0.0.0/24'}}}", "{'detail':{'sourceIPAddress':'10.0.0.33'}}", 1, 1},
	{"{'detail':{'state':{'anything-but':{'prefix':'init'}}}}", "{'detail':{'state':'initializing'}}", 0, 0},
	{"{'detail':{'state':{'anything-but':{'prefix':'init'}}}}", "{'detail':{'state':'running'}}", 1, 1},
	{"{'service':{'equals-ignore-case':'eventbridge'}}", "{'service':'EventBridge'}", 1, 1},
	{"{'resources':['arn:aws:ec2:us-east-1:123456789012:instance/i-b188560f']}", "{'resources':['arn:aws:ec2:us-east-1:123456789012:instance/i-b188560f','other']}", 0, 1},

	/* match_arrays: elements; exists stays about presence */
	{"{'tags':['a']}", "{'tags':['b','a']}", 0, 1},
	{"{'tags':['a']}", "{'tags':['b']}", 0, 0},
	{"{'tags':['a']}", "{'tags':[]}", 0, 0},
	{"{'tags':['a']}", "{'tags':[['x','a']]}", 0, 1},
	{"{'tags':['a']}", "{'tags':[{'a':1}]}", 0, 0},
	{"{'tags':{'exists':true}}", "{'tags':[]}", 1, 1},
	{"{'tags':{'exists':false}}", "{'tags':[]}", 0, 0},
	{"{'x':[null]}", "{'x':[null]}", 0, 1},
	{"{'x':[null]}", "{'x':null}", 1, 1},
	{"{'id':{'prefix':'u'}}", "{'id':['x','u1']}", 0, 1},
	{"{'n':{'gt':5}}", "{'n':[1,6]}", 0, 1},
	{"{'t':{'gt':'now()-5m'}}", "{'t':['2020-01-01T00:00:00Z','2026-09-13T11:58:00Z']}", 0, 1},
	{"{'items':{'sku':['A'],'qty':{'numeric':['>',1]}}}", "{'items':[{'sku':'A','qty':1},{'sku':'B','qty':5}]}", 0, 0},
	{"{'items':{'sku':['A'],'qty':{'numeric':['>',1]}}}", "{'items':[{'sku':'B','qty':5},{'sku':'A','qty':2}]}", 0, 1},
	{"{'items':{'sku':['A']}}", "{'items':[1,{'sku':'A'}]}", 0, 1},
	{"{'items':{'sku':['A']}}", "{'items':{'sku':'A'}}", 1, 1},
	{"{'items':{'sku':['A']}}", "{'items':[[{'sku':'A'}]]}", 0, 1},
	{"{'items':{'gone':{'exists':false}}}", "{'items':[]}", 1, 1},
	{"{'items':{'gone':{'exists':false}}}", "{'items':[{'gone':1}]}", 1, 0},
	{"{'items':{'gone':{'exists':false}}}", "{'items':[{'gone':1},{}]}", 1, 1},
	{"{'items':{'gone':{'exists':false}}}", "{'items':[5]}", 1, 1},
	{"{'a':{'b':{'c':['x']}}}", "{'a':[{'b':[{'c':'y'},{'c':['z','x']}]}]}", 0, 1},
	{"{'a':{'$or':[{'b':[1]},{'c':[2]}]}}", "{'a':[{'b':0},{'c':2}]}", 0, 1},
};
/* clang-format on */

TEST(operator_table)
{
	CHECK(ARRAY_LEN(op_rows) >= 200);
	for (size_t i = 0; i < ARRAY_LEN(op_rows); i++) {
		const struct op_row *r = &op_rows[i];
		check_row(i, r->pattern, r->event, NULL, PATTERN_ARRAYS_VALUES, r->want);
		check_row(i, r->pattern, r->event, NULL, PATTERN_ARRAYS_ELEMENTS, r->want_elements);
	}
}

/* match_arrays: elements changes nothing for an event without arrays:
 * every row of match_table agrees there. */
TEST(elements_mode_same_without_arrays)
{
	size_t checked = 0;
	for (size_t i = 0; i < ARRAY_LEN(match_rows); i++) {
		const struct match_row *r = &match_rows[i];
		if (strchr(r->event, '['))
			continue;
		check_row(i, r->pattern, r->event, r->now, PATTERN_ARRAYS_ELEMENTS, r->want);
		checked++;
	}
	CHECK(checked > 250);
}

struct invalid_row {
	const char *pattern; /* NULL: the pattern key is missing */
	int nerr;
	const char *want; /* a line of the error output, exactly */
};

/* clang-format off */
static const struct invalid_row invalid_rows[] = {
	{NULL, 1, "events[1].pattern: pattern is required"},
	{"null", 1, "events[1].pattern: pattern must be a map of field conditions, got null"},
	{"[1]", 1, "events[1].pattern: pattern must be a map of field conditions, got list"},
	{"'x'", 1, "events[1].pattern: pattern must be a map of field conditions, got string \"x\""},
	{"true", 1, "events[1].pattern: pattern must be a map of field conditions, got boolean true"},
	{"{'status':'COMPLETED'}", 1, "events[1].pattern.status: condition must be a list of values, an operator map or a nested field map, got string \"COMPLETED\""},
	{"{'status':null}", 1, "events[1].pattern.status: condition must be a list of values, an operator map or a nested field map, got null"},
	{"{'status':5}", 1, "events[1].pattern.status: condition must be a list of values, an operator map or a nested field map, got integer 5"},
	{"{'status':1.5}", 1, "events[1].pattern.status: condition must be a list of values, an operator map or a nested field map, got number 1.5"},
	{"{'status':true}", 1, "events[1].pattern.status: condition must be a list of values, an operator map or a nested field map, got boolean true"},
	{"{'status':[]}", 1, "events[1].pattern.status: empty list matches nothing"},
	{"{'status':[['a']]}", 1, "events[1].pattern.status[0]: values must be scalars (string, number, boolean or null), got list"},
	{"{'status':['a',{'b':1}]}", 1, "events[1].pattern.status[1]: values must be scalars (string, number, boolean or null), got map"},
	{"{'a':{}}", 1, "events[1].pattern.a: empty map (use exists: true to test presence)"},
	{"{'a':{'b':{}}}", 1, "events[1].pattern.a.b: empty map (use exists: true to test presence)"},
	{"{'':['x']}", 1, "events[1].pattern[\"\"]: empty field name"},
	{"{'a':{'':['x']}}", 1, "events[1].pattern.a[\"\"]: empty field name"},
	{"{'a':{'equals':['x'],'foo':['y']}}", 1, "events[1].pattern.a: map mixes operator keys (\"equals\") with field keys (\"foo\")"},
	{"{'a':{'b':{'prefix':['x'],'c':['y'],'exists':true}}}", 1, "events[1].pattern.a.b: map mixes operator keys (\"prefix\", \"exists\") with field keys (\"c\")"},
	{"{'exists':true}", 1, "events[1].pattern.exists: operator outside a field (write field: {exists: ...})"},
	{"{'prefix':['a'],'id':['x']}", 1, "events[1].pattern.prefix: operator outside a field (write field: {prefix: ...})"},
	{"{'a':{'exists':'true'}}", 1, "events[1].pattern.a.exists: must be true or false, got string \"true\""},
	{"{'a':{'exists':1}}", 1, "events[1].pattern.a.exists: must be true or false, got integer 1"},
	{"{'a':{'exists':0}}", 1, "events[1].pattern.a.exists: must be true or false, got integer 0"},
	{"{'a':{'exists':null}}", 1, "events[1].pattern.a.exists: must be true or false, got null"},
	{"{'a':{'exists':[true]}}", 1, "events[1].pattern.a.exists: must be true or false, got list"},
	{"{'a':{'equals':[]}}", 1, "events[1].pattern.a.equals: empty list matches nothing"},
	{"{'a':{'equals':[{'x':1}]}}", 1, "events[1].pattern.a.equals[0]: values must be scalars (string, number, boolean or null), got map"},
	{"{'a':{'equals':{'x':1}}}", 1, "events[1].pattern.a.equals: values must be scalars (string, number, boolean or null), got map"},
	{"{'a':{'prefix':[5]}}", 1, "events[1].pattern.a.prefix[0]: must be a string, got integer 5"},
	{"{'a':{'prefix':5}}", 1, "events[1].pattern.a.prefix: must be a string, got integer 5"},
	{"{'a':{'prefix':[true]}}", 1, "events[1].pattern.a.prefix[0]: must be a string, got boolean true"},
	{"{'a':{'prefix':[]}}", 1, "events[1].pattern.a.prefix: empty list matches nothing"},
	{"{'a':{'prefix':null}}", 1, "events[1].pattern.a.prefix: must be a string, got null"},
	{"{'a':{'suffix':[null]}}", 1, "events[1].pattern.a.suffix[0]: must be a string, got null"},
	{"{'a':{'suffix':[]}}", 1, "events[1].pattern.a.suffix: empty list matches nothing"},
	{"{'a':{'suffix':['x',['y']]}}", 1, "events[1].pattern.a.suffix[1]: must be a string, got list"},
	{"{'new_image':{'created_at':{'gt':'now-5m'}}}", 1, "events[1].pattern.new_image.created_at.gt: invalid temporal operand \"now-5m\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':'now'}}", 1, "events[1].pattern.t.gt: invalid temporal operand \"now\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':'2026-09-12T10:00:00Z'}}", 1, "events[1].pattern.t.gt: invalid temporal operand \"2026-09-12T10:00:00Z\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gte':'now()-'}}", 1, "events[1].pattern.t.gte: invalid temporal operand \"now()-\" (use now() or now()±<Go duration>)"},
	{"{'t':{'lt':'now()5m'}}", 1, "events[1].pattern.t.lt: invalid temporal operand \"now()5m\" (use now() or now()±<Go duration>)"},
	{"{'t':{'lte':'now() - 5m'}}", 1, "events[1].pattern.t.lte: invalid temporal operand \"now() - 5m\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':'now()--5m'}}", 1, "events[1].pattern.t.gt: invalid temporal operand \"now()--5m\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':'now()+-5m'}}", 1, "events[1].pattern.t.gt: invalid temporal operand \"now()+-5m\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':'now()-5'}}", 1, "events[1].pattern.t.gt: invalid temporal operand \"now()-5\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':'now()-5x'}}", 1, "events[1].pattern.t.gt: invalid temporal operand \"now()-5x\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':'now()-1d'}}", 1, "events[1].pattern.t.gt: invalid temporal operand \"now()-1d\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':'NOW()-5m'}}", 1, "events[1].pattern.t.gt: invalid temporal operand \"NOW()-5m\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':'now()-5m '}}", 1, "events[1].pattern.t.gt: invalid temporal operand \"now()-5m \" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':' now()'}}", 1, "events[1].pattern.t.gt: invalid temporal operand \" now()\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':'now( )'}}", 1, "events[1].pattern.t.gt: invalid temporal operand \"now( )\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':'now()*2'}}", 1, "events[1].pattern.t.gt: invalid temporal operand \"now()*2\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':'now()-9999999999h'}}", 1, "events[1].pattern.t.gt: invalid temporal operand \"now()-9999999999h\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':''}}", 1, "events[1].pattern.t.gt: invalid temporal operand \"\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':'5'}}", 1, "events[1].pattern.t.gt: invalid temporal operand \"5\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':'now()\\n'}}", 1, "events[1].pattern.t.gt: invalid temporal operand \"now()\\n\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':'now()\\u0000'}}", 1, "events[1].pattern.t.gt: invalid temporal operand \"now()\\x00\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gt':true}}", 1, "events[1].pattern.t.gt: must be a number or a now() expression, got boolean true"},
	{"{'t':{'gt':null}}", 1, "events[1].pattern.t.gt: must be a number or a now() expression, got null"},
	{"{'t':{'gt':{'a':1}}}", 1, "events[1].pattern.t.gt: must be a number or a now() expression, got map"},
	{"{'t':{'gt':[]}}", 1, "events[1].pattern.t.gt: empty list matches nothing"},
	{"{'t':{'gt':[1,'now']}}", 1, "events[1].pattern.t.gt[1]: invalid temporal operand \"now\" (use now() or now()±<Go duration>)"},
	{"{'t':{'gte':['now()',false]}}", 1, "events[1].pattern.t.gte[1]: must be a number or a now() expression, got boolean false"},
	{"{'t':{'lt':[[1]]}}", 1, "events[1].pattern.t.lt[0]: must be a number or a now() expression, got list"},
	{"{'a b':{'exists':'x'}}", 1, "events[1].pattern[\"a b\"].exists: must be true or false, got string \"x\""},
	{"{'a.b':{'exists':'x'}}", 1, "events[1].pattern[\"a.b\"].exists: must be true or false, got string \"x\""},
	{"{'cl\\u00e9':{'exists':'x'}}", 1, "events[1].pattern.cl\xc3\xa9.exists: must be true or false, got string \"x\""},
	{"{'a':{'exists':1},'b':[],'c':{'gt':'now'}}", 3, "events[1].pattern.b: empty list matches nothing"},
	{"{'a':{'exists':1},'b':[],'c':{'gt':'now'}}", 3, "events[1].pattern.a.exists: must be true or false, got integer 1"},
	{"{'a':{'exists':1},'b':[],'c':{'gt':'now'}}", 3, "events[1].pattern.c.gt: invalid temporal operand \"now\" (use now() or now()±<Go duration>)"},
	{"{'a':{'gt':['x','y',true]}}", 3, "events[1].pattern.a.gt[2]: must be a number or a now() expression, got boolean true"},
	{"{'a':{'b':{'c':{'exists':'no'}}},'d':{'prefix':[1]}}", 2, "events[1].pattern.d.prefix[0]: must be a string, got integer 1"},
	/* the operators EventBridge users know: every message names the rule, the field and the operator */
	{"{'a':{'anything-but':[]}}", 1, "events[1].pattern.a.anything-but: empty list matches nothing"},
	{"{'a':{'anything-but':{}}}", 1, "events[1].pattern.a.anything-but: must be a list of values or a map of one operator (prefix, suffix, equals-ignore-case or wildcard), got a map of 0 keys"},
	{"{'a':{'anything-but':{'prefix':'x','suffix':'y'}}}", 1, "events[1].pattern.a.anything-but: must be a list of values or a map of one operator (prefix, suffix, equals-ignore-case or wildcard), got a map of 2 keys"},
	{"{'a':{'anything-but':{'prefx':'x'}}}", 1, "events[1].pattern.a.anything-but.prefx: unknown operator \"prefx\" (anything-but takes a list of values or one of prefix, suffix, equals-ignore-case, wildcard)"},
	{"{'a':{'anything-but':{'numeric':['>',1]}}}", 1, "events[1].pattern.a.anything-but.numeric: unknown operator \"numeric\" (anything-but takes a list of values or one of prefix, suffix, equals-ignore-case, wildcard)"},
	{"{'a':{'anything-but':{'prefix':5}}}", 1, "events[1].pattern.a.anything-but.prefix: must be a string, got integer 5"},
	{"{'a':{'anything-but':{'suffix':[]}}}", 1, "events[1].pattern.a.anything-but.suffix: empty list matches nothing"},
	{"{'a':{'anything-but':{'wildcard':['*.a','x**']}}}", 1, "events[1].pattern.a.anything-but.wildcard[1]: \"x**\" has two stars in a row at byte 1 (one star already matches any run of characters)"},
	{"{'a':{'anything-but':[[1]]}}", 1, "events[1].pattern.a.anything-but[0]: values must be scalars (string, number, boolean or null), got list"},
	{"{'a':{'anything-but':['x',{'b':1}]}}", 1, "events[1].pattern.a.anything-but[1]: values must be scalars (string, number, boolean or null), got map"},
	{"{'a':{'equals-ignore-case':5}}", 1, "events[1].pattern.a.equals-ignore-case: must be a string, got integer 5"},
	{"{'a':{'equals-ignore-case':[]}}", 1, "events[1].pattern.a.equals-ignore-case: empty list matches nothing"},
	{"{'a':{'equals-ignore-case':['x',null]}}", 1, "events[1].pattern.a.equals-ignore-case[1]: must be a string, got null"},
	{"{'a':{'wildcard':'a**b'}}", 1, "events[1].pattern.a.wildcard: \"a**b\" has two stars in a row at byte 1 (one star already matches any run of characters)"},
	{"{'a':{'wildcard':'a\\\\'}}", 1, "events[1].pattern.a.wildcard: \"a\\\\\" ends with a lone backslash (write \\\\ for a backslash)"},
	{"{'a':{'wildcard':'a\\\\nb'}}", 1, "events[1].pattern.a.wildcard: \"a\\\\nb\" has an invalid escape \"\\n\" at byte 1 (only \\* and \\\\ are escapes)"},
	{"{'a':{'wildcard':'*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*'}}", 1, "events[1].pattern.a.wildcard: \"*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*\" is too costly to match: 33 stars, at most 32"},
	{"{'a':{'wildcard':[]}}", 1, "events[1].pattern.a.wildcard: empty list matches nothing"},
	{"{'a':{'wildcard':true}}", 1, "events[1].pattern.a.wildcard: must be a string, got boolean true"},
	{"{'a':{'cidr':'10.0.0.0'}}", 1, "events[1].pattern.a.cidr: \"10.0.0.0\" is not an address range such as 10.0.0.0/24 or 2001:db8::/32 (no /prefix length)"},
	{"{'a':{'cidr':'10.0.0.0/33'}}", 1, "events[1].pattern.a.cidr: \"10.0.0.0/33\" has a prefix length that is not a number from 0 to 32"},
	{"{'a':{'cidr':'10.0.0.0/08'}}", 1, "events[1].pattern.a.cidr: \"10.0.0.0/08\" has a prefix length that is not a number from 0 to 32"},
	{"{'a':{'cidr':'10.0.0.0/'}}", 1, "events[1].pattern.a.cidr: \"10.0.0.0/\" has a prefix length that is not a number from 0 to 32"},
	{"{'a':{'cidr':'10.0.0.0/-1'}}", 1, "events[1].pattern.a.cidr: \"10.0.0.0/-1\" has a prefix length that is not a number from 0 to 32"},
	{"{'a':{'cidr':'::/129'}}", 1, "events[1].pattern.a.cidr: \"::/129\" has a prefix length that is not a number from 0 to 128"},
	{"{'a':{'cidr':'10.0.0/8'}}", 1, "events[1].pattern.a.cidr: \"10.0.0/8\" is not an IPv4 or IPv6 address before the /"},
	{"{'a':{'cidr':'10.0.0.256/8'}}", 1, "events[1].pattern.a.cidr: \"10.0.0.256/8\" is not an IPv4 or IPv6 address before the /"},
	{"{'a':{'cidr':'2001:db8:::/32'}}", 1, "events[1].pattern.a.cidr: \"2001:db8:::/32\" is not an IPv4 or IPv6 address before the /"},
	{"{'a':{'cidr':['10.0.0.0/8',5]}}", 1, "events[1].pattern.a.cidr[1]: must be a string, got integer 5"},
	{"{'a':{'numeric':5}}", 1, "events[1].pattern.a.numeric: must be a list such as [\">\", 0, \"<=\", 5], got integer 5"},
	{"{'a':{'numeric':'>5'}}", 1, "events[1].pattern.a.numeric: must be a list such as [\">\", 0, \"<=\", 5], got string \">5\""},
	{"{'a':{'numeric':[]}}", 1, "events[1].pattern.a.numeric: empty list matches nothing"},
	{"{'a':{'numeric':['>',0,'<']}}", 1, "events[1].pattern.a.numeric: must be pairs of an operator and a number, got 3 elements"},
	{"{'a':{'numeric':['=>',0]}}", 1, "events[1].pattern.a.numeric[0]: unknown operator: must be one of =, <, <=, >, >=, got string \"=>\""},
	{"{'a':{'numeric':[0,'>']}}", 2, "events[1].pattern.a.numeric[0]: unknown operator: must be one of =, <, <=, >, >=, got integer 0"},
	{"{'a':{'numeric':['>','0']}}", 1, "events[1].pattern.a.numeric[1]: must be a number, got string \"0\""},
	{"{'a':{'numeric':['>',null]}}", 1, "events[1].pattern.a.numeric[1]: must be a number, got null"},
	{"{'a':{'numeric':[['>',0],'<']}}", 1, "events[1].pattern.a.numeric[1]: must be a range such as [\">\", 0], as the first element is, got string \"<\""},
	{"{'a':{'numeric':[['>',0],[]]}}", 1, "events[1].pattern.a.numeric[1]: empty list matches nothing"},
	{"{'a':{'numeric':[['>',0],['<','x']]}}", 1, "events[1].pattern.a.numeric[1][1]: must be a number, got string \"x\""},
	{"{'$or':[{'a':[1]}]}", 1, "events[1].pattern.$or: needs at least 2 branches, got 1"},
	{"{'$or':[]}", 1, "events[1].pattern.$or: needs at least 2 branches, got 0"},
	{"{'$or':{'a':[1]}}", 1, "events[1].pattern.$or: must be a list of at least 2 patterns, got map"},
	{"{'$or':[{'a':[1]},'x']}", 1, "events[1].pattern.$or[1]: a branch must be a map of field conditions, got string \"x\""},
	{"{'$or':[{'a':[1]},{}]}", 1, "events[1].pattern.$or[1]: empty branch (it would match every event)"},
	{"{'$or':[{'a':[1]},{'prefix':'x'}]}", 1, "events[1].pattern.$or[1].prefix: operator outside a field (write field: {prefix: ...})"},
	{"{'$or':[{'a':[]},{'b':{'cidr':'x'}}]}", 2, "events[1].pattern.$or[1].b.cidr: \"x\" is not an address range such as 10.0.0.0/24 or 2001:db8::/32 (no /prefix length)"},
	{"{'x':{'$or':[{'a':[1]},{'b':{'$or':[{'c':[]},{'d':[1]}]}}]}}", 1, "events[1].pattern.x.$or[1].b.$or[0].c: empty list matches nothing"},
	{"{'a':{'prefix':'x','$or':[{'b':[1]},{'c':[1]}]}}", 1, "events[1].pattern.a: map mixes operator keys (\"prefix\") with field keys (\"$or\")"},
	{"{'a':{'numeric':['>',1],'b':[1]}}", 1, "events[1].pattern.a: map mixes operator keys (\"numeric\") with field keys (\"b\")"},
	{"{'wildcard':'*'}", 1, "events[1].pattern.wildcard: operator outside a field (write field: {wildcard: ...})"},
};
/* clang-format on */

TEST(validation_table)
{
	for (size_t i = 0; i < ARRAY_LEN(invalid_rows); i++) {
		const struct invalid_row *r = &invalid_rows[i];
		json_t *pj = r->pattern ? pjson(r->pattern) : NULL;
		if (r->pattern && !pj) {
			T_FAIL_("row %zu: bad JSON", i);
			continue;
		}
		struct pattern *p = (struct pattern *)1;
		struct buf errs;
		buf_init(&errs, 1 << 16);
		int rc = pattern_compile(pj, "events[1].pattern", &p, &errs);
		if (rc != -r->nerr || p != NULL)
			T_FAIL_("row %zu: %s: rc %d, want %d", i, r->pattern, rc, -r->nerr);
		if (!t_has_line(errs.data, r->want))
			T_FAIL_("row %zu: %s\n    got:  %s    want: %s", i, r->pattern,
				errs.data ? errs.data : "(nothing)\n", r->want);
		buf_free(&errs);
		json_decref(pj);
	}
}

/* Patterns that must compile: every valid operand form. */
static const char *const valid_patterns[] = {
	"{}",
	"{'a':['x',1,1.5,true,false,null]}",
	"{'a':{'equals':'x'}}",
	"{'a':{'equals':[null]}}",
	"{'a':{'prefix':['']}}",
	"{'a':{'suffix':'x'}}",
	"{'a':{'exists':true}}",
	"{'a':{'exists':false,'prefix':['12']}}",
	"{'a':{'gt':0,'gte':-1.5,'lt':1e300,'lte':9223372036854775807}}",
	"{'a':{'gt':'now()'}}",
	"{'a':{'gt':'now()+0s'}}",
	"{'a':{'gt':'now()-0'}}",
	"{'a':{'gt':'now()-5m'}}",
	"{'a':{'gt':'now()+10m'}}",
	"{'a':{'gt':'now()-1h'}}",
	"{'a':{'gt':'now()+24h'}}",
	"{'a':{'gt':'now()-1h30m'}}",
	"{'a':{'gt':'now()-2m3.5s'}}",
	"{'a':{'gt':'now()-1.5h'}}",
	"{'a':{'gt':'now()-300ms'}}",
	"{'a':{'gt':'now()-10us'}}",
	"{'a':{'gt':'now()-10\xc2\xb5s'}}",
	"{'a':{'gt':'now()-10\xce\xbcs'}}",
	"{'a':{'gt':'now()-100ns'}}",
	"{'a':{'gt':'now()-.5h'}}",
	"{'a':{'gt':'now()-2562047h'}}",
	"{'a':{'gt':[1,'now()-1h',2.5]}}",
	"{'a':{'b':{'c':{'d':['x']}}}}",
	"{'a':{'b':['x'],'c':{'exists':false}},'d':['y']}",
	"{'equal':['x']}",
	"{'a':{'anything-but':'x'}}",
	"{'a':{'anything-but':[1,'1',null,true]}}",
	"{'a':{'anything-but':{'prefix':''}}}",
	"{'a':{'anything-but':{'suffix':['a','b']}}}",
	"{'a':{'anything-but':{'equals-ignore-case':'X'}}}",
	"{'a':{'anything-but':{'wildcard':'*'}}}",
	"{'a':{'equals-ignore-case':['']}}",
	"{'a':{'wildcard':['','*','\\\\*','\\\\\\\\','a*b*c']}}",
	"{'a':{'cidr':['0.0.0.0/0','::/0','10.0.0.1/32','::ffff:1.2.3.4/128','2001:db8::/32']}}",
	"{'a':{'numeric':['=',-0.0]}}",
	"{'a':{'numeric':[['<',0],['>',1e300],['>=',1,'<=',2,'=',1.5]]}}",
	"{'$or':[{'a':[1]},{'b':{'$or':[{'c':[1]},{'d':[2]}]}}],'e':{'exists':true}}",
	"{'a':{'$or':[{'b':[1]},{'c':[1]}]}}",
	"{'any-thing':['x'],'$and':['y'],'or':['z']}",
};

TEST(valid_patterns_compile)
{
	for (size_t i = 0; i < ARRAY_LEN(valid_patterns); i++) {
		json_t *pj = pjson(valid_patterns[i]);
		struct pattern *p = NULL;
		struct buf errs;
		buf_init(&errs, 4096);
		int rc = pattern_compile(pj, "events[0].pattern", &p, &errs);
		if (rc != 0 || !p)
			T_FAIL_("%s: %s", valid_patterns[i], errs.data ? errs.data : "");
		CHECK_INT(errs.len, 0);
		buf_free(&errs);
		pattern_free(p);
		json_decref(pj);
	}
}

TEST(depth_limit)
{
	/* PATTERN_MAX_DEPTH maps compile; one more is an error naming the path */
	for (int extra = 0; extra <= 1; extra++) {
		int levels = PATTERN_MAX_DEPTH + extra;
		json_t *leaf = json_pack("{s:[s]}", "f", "x");
		for (int i = 1; i < levels; i++)
			leaf = json_pack("{s:o}", "f", leaf);
		struct pattern *p = NULL;
		struct buf errs;
		buf_init(&errs, 1 << 16);
		int rc = pattern_compile(leaf, "p", &p, &errs);
		if (extra == 0) {
			CHECK_INT(rc, 0);
			struct buf ev;
			buf_init(&ev, 1 << 16);
			for (int i = 0; i < levels; i++)
				buf_appendf(&ev, "{\"f\":");
			buf_appendf(&ev, "\"x\"");
			for (int i = 0; i < levels; i++)
				buf_appendf(&ev, "}");
			struct event *e = NULL;
			CHECK_INT(event_parse_json(ev.data, ev.len, &e, NULL), EVENT_OK);
			CHECK(pattern_match(p, e, 0));
			event_free(e);
			buf_free(&ev);
		} else {
			CHECK_INT(rc, -1);
			CHECK(errs.data && strstr(errs.data, "nested deeper than 32 levels"));
			CHECK(errs.data && str_has_prefix(errs.data, "p.f.f.f."));
		}
		buf_free(&errs);
		pattern_free(p);
		json_decref(leaf);
	}
}

/* $or: PATTERN_MAX_OR_BRANCHES branches compile, one more is an error;
 * each $or level counts against PATTERN_MAX_DEPTH like a nested map. */
TEST(or_limits)
{
	for (int extra = 0; extra <= 1; extra++) {
		json_t *alts = json_array();
		for (int i = 0; i < PATTERN_MAX_OR_BRANCHES + extra; i++)
			json_array_append_new(alts, json_pack("{s:[i]}", "n", i));
		json_t *pj = json_pack("{s:o}", "$or", alts);
		struct pattern *p = NULL;
		struct buf errs;
		buf_init(&errs, 4096);
		int rc = pattern_compile(pj, "events[2].pattern", &p, &errs);
		if (extra == 0) {
			CHECK_INT(rc, 0);
			struct event *ev = pevent("{'n':63}");
			CHECK(pattern_match(p, ev, 0));
			event_free(ev);
			ev = pevent("{'n':64}");
			CHECK(!pattern_match(p, ev, 0));
			event_free(ev);
		} else {
			CHECK_INT(rc, -1);
			CHECK_STR(errs.data, "events[2].pattern.$or: more than 64 branches (65)\n");
		}
		buf_free(&errs);
		pattern_free(p);
		json_decref(pj);
	}
	for (int extra = 0; extra <= 1; extra++) {
		/* levels maps: the pattern, then $or branches inside $or branches */
		int levels = PATTERN_MAX_DEPTH + extra;
		json_t *node = json_pack("{s:[s]}", "f", "x");
		for (int i = 1; i < levels; i++)
			node = json_pack("{s:[o,{s:[s]}]}", "$or", node, "g", "never");
		struct pattern *p = NULL;
		struct buf errs;
		buf_init(&errs, 1 << 16);
		int rc = pattern_compile(node, "p", &p, &errs);
		if (extra == 0) {
			CHECK_INT(rc, 0);
			struct event *ev = pevent("{'f':'x'}");
			CHECK(pattern_match(p, ev, 0));
			event_free(ev);
		} else {
			CHECK_INT(rc, -1);
			CHECK(errs.data &&
			      strstr(errs.data, ": pattern nested deeper than 32 levels\n"));
			CHECK(errs.data && str_has_prefix(errs.data, "p.$or[0].$or[0].$or[0]."));
		}
		buf_free(&errs);
		pattern_free(p);
		json_decref(node);
	}
}

/* A pattern with 64-branch $or maps nested 31 deep would be 64^31 paths
 * if multiplied out; tried in turn, a miss costs one walk of the pattern:
 * here every branch but the last fails at once, so the work is linear. */
TEST(or_is_not_multiplied_out)
{
	json_t *node = json_pack("{s:[s]}", "f", "x");
	for (int d = 1; d < PATTERN_MAX_DEPTH; d++) {
		json_t *alts = json_array();
		for (int i = 0; i < PATTERN_MAX_OR_BRANCHES - 1; i++)
			json_array_append_new(alts, json_pack("{s:[i]}", "g", i));
		json_array_append_new(alts, node);
		node = json_pack("{s:o}", "$or", alts);
	}
	struct pattern *p = NULL;
	REQUIRE(pattern_compile(node, "p", &p, NULL) == 0);
	struct event *ev = pevent("{'f':'x'}"), *miss = pevent("{'f':'y'}");
	int64_t t0 = now_mono_ns();
	CHECK(pattern_match(p, ev, 0));
	CHECK(!pattern_match(p, miss, 0));
	/* about 2,000 branch evaluations: well under a second even under ASan
	 * on a loaded machine (64^31 would never end) */
	CHECK(now_mono_ns() - t0 < 1000000000LL);
	event_free(ev);
	event_free(miss);
	pattern_free(p);
	json_decref(node);
}

TEST(long_operand_is_truncated_in_message)
{
	char big[300];
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	json_t *pj = json_pack("{s:{s:s}}", "t", "gt", big);
	struct pattern *p = NULL;
	struct buf errs;
	buf_init(&errs, 4096);
	CHECK_INT(pattern_compile(pj, "p", &p, &errs), -1);
	CHECK(errs.data && strstr(errs.data, "xxx\"... (use now()"));
	CHECK(errs.len < 200);
	buf_free(&errs);
	json_decref(pj);
}

TEST(errors_accumulate_across_rules)
{
	struct buf errs;
	buf_init(&errs, 4096);
	json_t *a = pjson("{'x':[]}"), *b = pjson("{'y':{'exists':'no'}}");
	struct pattern *p;
	CHECK_INT(pattern_compile(a, "events[0].pattern", &p, &errs), -1);
	CHECK_INT(pattern_compile(b, "events[1].pattern", &p, &errs), -1);
	CHECK_STR(errs.data,
		  "events[0].pattern.x: empty list matches nothing\n"
		  "events[1].pattern.y.exists: must be true or false, got string \"no\"\n");
	/* NULL errors buffer and NULL path are allowed */
	CHECK_INT(pattern_compile(a, NULL, &p, NULL), -1);
	json_decref(a);
	json_decref(b);
	buf_free(&errs);
}

/* ---- pattern sets ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state % n);
}

static const char *const values[] = {"1",
				     "1.0",
				     "'1'",
				     "true",
				     "false",
				     "null",
				     "'a'",
				     "'b'",
				     "2.5",
				     "-3",
				     "'2026-09-13T11:59:00Z'",
				     "''"};
static const char *const fields[] = {"f0", "f1", "f2", "f3"};

static void gen_cond(struct buf *b)
{
	switch (rnd(7)) {
	case 0:
	case 1:
	case 2: { /* implicit equality, 1-3 values */
		int n = 1 + (int)rnd(3);
		buf_appendf(b, "[");
		for (int i = 0; i < n; i++)
			buf_appendf(b, "%s%s", i ? "," : "", values[rnd(ARRAY_LEN(values))]);
		buf_appendf(b, "]");
		break;
	}
	case 3: buf_appendf(b, "{'prefix':['%c']}", "ab2"[rnd(3)]); break;
	case 4: buf_appendf(b, "{'exists':%s}", rnd(2) ? "true" : "false"); break;
	case 5: buf_appendf(b, "{'gt':%s}", rnd(2) ? "0" : "'now()-5m'"); break;
	default: buf_appendf(b, "{'equals':[%s],'lt':2}", values[rnd(ARRAY_LEN(values))]); break;
	}
}

static char *gen_pattern(void)
{
	struct buf b;
	buf_init(&b, 1 << 16);
	buf_appendf(&b, "{");
	int n = (int)rnd(4);
	bool first = true;
	for (int i = 0; i < (int)ARRAY_LEN(fields); i++) {
		if ((int)rnd(4) >= n)
			continue;
		buf_appendf(&b, "%s'%s':", first ? "" : ",", fields[i]);
		first = false;
		gen_cond(&b);
	}
	if (rnd(2)) {
		buf_appendf(&b, "%s'n':{'x':", first ? "" : ",");
		gen_cond(&b);
		buf_appendf(&b, "}");
	}
	buf_appendf(&b, "}");
	char *s = unquote(b.data);
	buf_free(&b);
	return s;
}

static void gen_value(struct buf *b)
{
	switch (rnd(10)) {
	case 0: buf_appendf(b, "['a']"); break;
	case 1: buf_appendf(b, "{'x':1}"); break;
	default: buf_appendf(b, "%s", values[rnd(ARRAY_LEN(values))]);
	}
}

static char *gen_event(void)
{
	struct buf b;
	buf_init(&b, 1 << 16);
	buf_appendf(&b, "{");
	bool first = true;
	for (size_t i = 0; i < ARRAY_LEN(fields); i++) {
		if (rnd(5) == 0)
			continue;
		buf_appendf(&b, "%s'%s':", first ? "" : ",", fields[i]);
		first = false;
		gen_value(&b);
	}
	switch (rnd(4)) {
	case 0: break;
	case 1: buf_appendf(&b, "%s'n':null", first ? "" : ","); break;
	default:
		buf_appendf(&b, "%s'n':{'x':", first ? "" : ",");
		gen_value(&b);
		buf_appendf(&b, "}");
	}
	buf_appendf(&b, "}");
	char *s = unquote(b.data);
	buf_free(&b);
	return s;
}

/* NPAT generated rules (the odd ones under match_arrays: elements when
 * mixed) and NEV generated events: the set finds exactly the rules that
 * match one by one, in order. Counts the matches, those of odd rules, and
 * the rules the index cannot narrow. */
struct set_run {
	size_t total, odd, unindexed;
};

static struct set_run set_against_naive(char *(*gen_ev)(void), bool mixed)
{
	enum { NPAT = 400, NEV = 3000 };
	struct set_run run = {0};
	struct pattern **pats = xcalloc(NPAT, sizeof *pats);
	int64_t now = ns_of(NOW);
	for (int i = 0; i < NPAT; i++) {
		char *text = gen_pattern();
		json_t *j = json_loads(text, 0, NULL);
		struct buf errs;
		buf_init(&errs, 4096);
		enum pattern_arrays arrays =
			mixed && i % 2 ? PATTERN_ARRAYS_ELEMENTS : PATTERN_ARRAYS_VALUES;
		if (!j || pattern_compile_arrays(j, "p", arrays, &pats[i], &errs) != 0)
			T_FAIL_("generated pattern %s: %s", text, errs.data ? errs.data : "");
		buf_free(&errs);
		json_decref(j);
		free(text);
	}
	struct pattern_set *set = pattern_set_new((const struct pattern *const *)pats, NPAT);
	CHECK_INT(pattern_set_size(set), NPAT);
	run.unindexed = pattern_set_unindexed(set);
	uint32_t *ids = xmalloc(NPAT * sizeof *ids);
	for (int e = 0; e < NEV; e++) {
		char *text = gen_ev();
		struct event *ev = NULL;
		if (event_parse_json(text, strlen(text), &ev, NULL) != EVENT_OK) {
			T_FAIL_("generated event %s does not parse", text);
			free(text);
			continue;
		}
		size_t n = pattern_set_match(set, ev, now, ids);
		size_t k = 0;
		bool ok = true;
		for (uint32_t i = 0; i < NPAT; i++) {
			if (!pats[i] || !pattern_match(pats[i], ev, now))
				continue;
			if (k >= n || ids[k] != i)
				ok = false;
			k++;
			run.odd += i % 2;
		}
		if (!ok || k != n)
			T_FAIL_("event %s: set found %zu, naive %zu (or order differs)", text, n,
				k);
		run.total += n;
		event_free(ev);
		free(text);
	}
	free(ids);
	pattern_set_free(set);
	for (int i = 0; i < NPAT; i++)
		pattern_free(pats[i]);
	free(pats);
	return run;
}

TEST(set_equals_naive_evaluation)
{
	struct set_run run = set_against_naive(gen_event, false);
	CHECK(run.unindexed < 200); /* the index is doing something */
	CHECK(run.total > 3000);    /* the generated workload actually matches things */
}

/* Events whose fields hold arrays of values, nested arrays and arrays of
 * objects. */
static void gen_array_value(struct buf *b)
{
	switch (rnd(4)) {
	case 0: gen_value(b); break;
	case 1: {
		int n = (int)rnd(4);
		buf_appendf(b, "[");
		for (int i = 0; i < n; i++) {
			buf_appendf(b, "%s", i ? "," : "");
			gen_value(b);
		}
		buf_appendf(b, "]");
		break;
	}
	case 2:
		buf_appendf(b, "[[%s],%s]", values[rnd(ARRAY_LEN(values))],
			    values[rnd(ARRAY_LEN(values))]);
		break;
	default:
		buf_appendf(b, "[{'x':%s},{'x':[%s]},5]", values[rnd(ARRAY_LEN(values))],
			    values[rnd(ARRAY_LEN(values))]);
	}
}

static char *gen_array_event(void)
{
	struct buf b;
	buf_init(&b, 1 << 16);
	buf_appendf(&b, "{");
	for (size_t i = 0; i < ARRAY_LEN(fields); i++) {
		buf_appendf(&b, "%s'%s':", i ? "," : "", fields[i]);
		gen_array_value(&b);
	}
	buf_appendf(&b, ",'n':");
	if (rnd(2)) {
		buf_appendf(&b, "[{'x':");
		gen_array_value(&b);
		buf_appendf(&b, "},{'x':");
		gen_array_value(&b);
		buf_appendf(&b, "}]");
	} else {
		buf_appendf(&b, "{'x':");
		gen_array_value(&b);
		buf_appendf(&b, "}");
	}
	buf_appendf(&b, "}");
	char *s = unquote(b.data);
	buf_free(&b);
	return s;
}

/* Half the rules under match_arrays: elements, events with arrays of
 * values and of objects: the index looks into arrays for those rules and
 * still agrees with rule-by-rule evaluation, and still narrows. */
TEST(set_with_elements_mode_equals_naive_evaluation)
{
	struct set_run run = set_against_naive(gen_array_event, true);
	CHECK(run.unindexed < 200); /* elements rules are indexed too */
	CHECK(run.total > 3000);
	CHECK(run.odd > 1500); /* elements rules match through arrays */
}

/* An array holding many values of one path can name more candidates than
 * the set has rules (ids has room for the set's size): every rule is then
 * evaluated, each once. */
TEST(set_candidates_past_the_set_size)
{
	struct pattern *pats[3];
	const char *texts[] = {"{'t':['a','b','c']}", "{'t':['a','b']}", "{'u':{'exists':true}}"};
	for (int i = 0; i < 3; i++) {
		json_t *j = pjson(texts[i]);
		REQUIRE(pattern_compile_arrays(j, "p", PATTERN_ARRAYS_ELEMENTS, &pats[i], NULL) ==
			0);
		json_decref(j);
	}
	struct pattern_set *set = pattern_set_new((const struct pattern *const *)pats, 3);
	CHECK_INT(pattern_set_unindexed(set), 1);
	uint32_t ids[3];
	struct event *ev = pevent("{'t':['a','b','c','a','b','a'],'u':1}");
	CHECK_INT(pattern_set_match(set, ev, 0, ids), 3);
	CHECK_INT(ids[0], 0);
	CHECK_INT(ids[1], 1);
	CHECK_INT(ids[2], 2);
	event_free(ev);
	ev = pevent("{'t':['c','c']}");
	CHECK_INT(pattern_set_match(set, ev, 0, ids), 1);
	CHECK_INT(ids[0], 0);
	event_free(ev);
	ev = pevent("{'t':'b'}");
	CHECK_INT(pattern_set_match(set, ev, 0, ids), 2);
	event_free(ev);
	pattern_set_free(set);
	for (int i = 0; i < 3; i++)
		pattern_free(pats[i]);
}

TEST(set_keeps_order_and_duplicates)
{
	const char *texts[] = {
		"{'t':['users']}",			  /* 0 indexed */
		"{'id':{'prefix':['user_']}}",		  /* 1 unindexed */
		"{'t':['users'],'e':['INSERT']}",	  /* 2 */
		"{'t':['orders']}",			  /* 3 */
		"{'t':['users']}",			  /* 4 same as 0: both run */
		"{'n':{'v':[5.0]}}",			  /* 5 numeric canonical */
		"{'t':['users','orders'],'n':{'v':[5]}}", /* 6 */
		"{}",					  /* 7 matches everything */
	};
	enum { N = ARRAY_LEN(texts) };
	struct pattern *pats[N];
	for (size_t i = 0; i < N; i++) {
		json_t *j = pjson(texts[i]);
		REQUIRE(pattern_compile(j, "p", &pats[i], NULL) == 0);
		json_decref(j);
	}
	struct pattern_set *set = pattern_set_new((const struct pattern *const *)pats, N);
	CHECK_INT(pattern_set_unindexed(set), 2);
	uint32_t ids[N];
	struct event *ev = pevent("{'t':'users','e':'INSERT','id':'user_1','n':{'v':5}}");
	size_t n = pattern_set_match(set, ev, 0, ids);
	CHECK_INT(n, 7);
	const uint32_t want[] = {0, 1, 2, 4, 5, 6, 7};
	for (size_t i = 0; i < n && i < ARRAY_LEN(want); i++)
		CHECK_INT(ids[i], want[i]);
	event_free(ev);
	ev = pevent("{'t':'orders','n':{'v':5.0}}");
	n = pattern_set_match(set, ev, 0, ids);
	CHECK_INT(n, 4);
	CHECK_INT(ids[0], 3);
	CHECK_INT(ids[1], 5);
	CHECK_INT(ids[2], 6);
	CHECK_INT(ids[3], 7);
	event_free(ev);
	ev = pevent("{'t':['users'],'n':[5]}");
	n = pattern_set_match(set, ev, 0, ids);
	CHECK_INT(n, 1);
	CHECK_INT(ids[0], 7);
	event_free(ev);
	pattern_set_free(set);
	for (size_t i = 0; i < N; i++)
		pattern_free(pats[i]);

	/* an empty set */
	set = pattern_set_new(NULL, 0);
	ev = pevent("{}");
	CHECK_INT(pattern_set_match(set, ev, 0, ids), 0);
	event_free(ev);
	pattern_set_free(set);
}

TEST(set_picks_selective_field)
{
	/* 100 rules share event_name; each has its own table: an INSERT on
	 * table_7 must evaluate only its own rule, not all 100 */
	enum { N = 100 };
	struct pattern *pats[N];
	for (int i = 0; i < N; i++) {
		json_t *j = json_pack("{s:[s],s:[s]}", "event_name", "INSERT", "table_name", "");
		json_array_set_new(json_object_get(j, "table_name"), 0,
				   json_sprintf("table_%d", i));
		REQUIRE(pattern_compile(j, "p", &pats[i], NULL) == 0);
		json_decref(j);
	}
	struct pattern_set *set = pattern_set_new((const struct pattern *const *)pats, N);
	CHECK_INT(pattern_set_unindexed(set), 0);
	uint32_t ids[N];
	struct event *ev = pevent("{'event_name':'INSERT','table_name':'table_7'}");
	CHECK_INT(pattern_set_match(set, ev, 0, ids), 1);
	CHECK_INT(ids[0], 7);
	event_free(ev);
	pattern_set_free(set);
	for (int i = 0; i < N; i++)
		pattern_free(pats[i]);
}

/* Building a set is sorting and binary search: 3,000 rules with ten
 * required-equality fields each, at 30,000 distinct paths, cost O(m log m)
 * comparisons and allocations for m values. (A linear search of the paths
 * per path and one reallocation per element made this 450 million steps.)
 * The set still matches as naive evaluation does. */
TEST(set_build_work_is_m_log_m)
{
	enum { NPAT = 3000, FIELDS = 10 };
	struct pattern **pats = xcalloc(NPAT, sizeof *pats);
	for (int i = 0; i < NPAT; i++) {
		json_t *j = json_object();
		for (int f = 0; f < FIELDS; f++) {
			char key[32];
			snprintf_(key, sizeof key, "f%d_%d", i, f);
			/* Values shared across rules, one of them a real. */
			json_object_set_new(j, key,
					    json_pack("[i,f,s]", i % 7, 1.0 * (f % 3), "x"));
		}
		json_object_set_new(j, "t", json_pack("[i]", i % 100));
		REQUIRE(pattern_compile(j, "p", &pats[i], NULL) == 0);
		json_decref(j);
	}
	struct pattern_set *set = pattern_set_new((const struct pattern *const *)pats, NPAT);
	double m = NPAT * (FIELDS * 3 + 1);
	uint64_t bound = (uint64_t)(8 * m * log2(m));
	if (pattern_set_build_work(set) > bound)
		T_FAIL_("%llu comparisons and allocations for %.0f values; bound %llu",
			(unsigned long long)pattern_set_build_work(set), m,
			(unsigned long long)bound);
	CHECK_INT(pattern_set_unindexed(set), 0);
	uint32_t *ids = xmalloc(NPAT * sizeof *ids);
	for (int k = 0; k < 3; k++) {
		char text[128];
		snprintf_(text, sizeof text, "{\"t\": %d, \"f%d_0\": %d, \"f%d_1\": 1}", k, k,
			  k % 7, k);
		struct event *ev = NULL;
		REQUIRE(event_parse_json(text, strlen(text), &ev, NULL) == EVENT_OK);
		size_t n = pattern_set_match(set, ev, 0, ids);
		size_t want = 0;
		for (int i = 0; i < NPAT; i++)
			want += pattern_match(pats[i], ev, 0);
		CHECK_INT(n, want);
		event_free(ev);
	}
	free(ids);
	pattern_set_free(set);
	for (int i = 0; i < NPAT; i++)
		pattern_free(pats[i]);
	free(pats);
}

T_MAIN(T_CASE(match_table), T_CASE(operator_table), T_CASE(elements_mode_same_without_arrays),
       T_CASE(validation_table), T_CASE(valid_patterns_compile), T_CASE(depth_limit),
       T_CASE(or_limits), T_CASE(or_is_not_multiplied_out),
       T_CASE(long_operand_is_truncated_in_message), T_CASE(errors_accumulate_across_rules),
       T_CASE(set_equals_naive_evaluation), T_CASE(set_with_elements_mode_equals_naive_evaluation),
       T_CASE(set_candidates_past_the_set_size), T_CASE(set_keeps_order_and_duplicates),
       T_CASE(set_picks_selective_field), T_CASE(set_build_work_is_m_log_m))
